/* linear.c - the float8 linear layer (placeholder: being written). */
#include "internal.h"
