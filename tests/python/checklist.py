"""checklist.py - the pass / fail bookkeeping of the binding tests."""


class Checklist:
    """check(ok, what) counts a check and prints what failed; finish() prints
    the tally and returns the exit code (0: all passed, 1: a failure)."""

    def __init__(self, name):
        self.name, self.checks, self.failures = name, 0, 0

    def __call__(self, ok, what):
        self.checks += 1
        if not ok:
            self.failures += 1
            print("FAIL " + what)

    def finish(self):
        print("%s: %d checks, %d failed" % (self.name, self.checks, self.failures))
        return 1 if self.failures else 0
