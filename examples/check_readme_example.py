"""check_readme_example.py - README.md's C example must be examples/quickstart.c,
character for character (the file is the one that is compiled and run).

    python3 examples/check_readme_example.py README.md examples/quickstart.c
"""
import sys


def main():
    readme, source = sys.argv[1], sys.argv[2]
    text = open(readme, encoding="utf-8").read()
    want = open(source, encoding="utf-8").read()
    blocks = text.split("```c\n")[1:]
    shown = [b.split("```", 1)[0] for b in blocks]
    if want in shown:
        print("README.md shows examples/quickstart.c as it is")
        return 0
    print("FAIL: no ```c block of README.md equals examples/quickstart.c; copy the file into README.md")
    return 1


if __name__ == "__main__":
    sys.exit(main())
