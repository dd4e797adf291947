# The torch-tpu C library and its unit tests. No PyTorch needed.
#
#   make            build build/c/libtpu.a and every test binary
#   make test       run every test (TORCH_TPU_CHIPS=2, so multi-chip paths run),
#                   TEST_JOBS (2) at a time
#   make sanitize   the same under AddressSanitizer and UBSan, in build/c-san
#   make clean

CC ?= cc
BUILD ?= build/c
# float-cast-overflow: GCC's `undefined` leaves out out-of-range float -> int casts.
SAN_FLAGS := -fsanitize=address,undefined,float-cast-overflow -fno-omit-frame-pointer -fno-sanitize-recover=all -O1

OPT ?= -O3
# -fno-math-errno: nothing reads errno, and without it sqrtf cannot be
# one instruction in a vectorised loop (the result bits are IEEE's either way).
CFLAGS := -std=c11 -Wall -Wextra -Werror $(OPT) -fno-math-errno -fvisibility=hidden -pthread -Isrc/include $(EXTRA_CFLAGS)
LDFLAGS := -pthread $(EXTRA_LDFLAGS)
LDLIBS := -lm

LIB_SRCS := $(wildcard src/runtime/*.c src/kernels/*.c src/fuse/*.c)
LIB_OBJS := $(patsubst src/%.c,$(BUILD)/obj/%.o,$(LIB_SRCS))
TEST_SRCS := $(wildcard tests/c/test_*.c)
TEST_BINS := $(patsubst tests/c/%.c,$(BUILD)/bin/%,$(TEST_SRCS))
LIB := $(BUILD)/libtpu.a

.PHONY: all test sanitize clean

all: $(LIB) $(TEST_BINS)

$(BUILD)/obj/%.o: src/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(LIB): $(LIB_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@
	$(AR) rcs $@ $^

$(BUILD)/bin/%: tests/c/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -Itests/c -Isrc/kernels -Isrc/fuse $< $(LIB) $(LDFLAGS) $(LDLIBS) -o $@

# Runs every test even if one fails, then fails if any did: TEST_JOBS
# binaries at a time (the longest first, so they overlap the rest), each
# one's output kept in its .log and shown whole if it failed, else its
# last line.
TEST_JOBS ?= 2
TEST_FIRST := $(filter %/test_kernels_attention %/test_kernels_vecmath,$(TEST_BINS))
TEST_ORDER := $(TEST_FIRST) $(filter-out $(TEST_FIRST),$(TEST_BINS))
test: all
	@printf '%s\n' $(TEST_ORDER) | xargs -P $(TEST_JOBS) -I{} sh -c \
	    'if TORCH_TPU_CHIPS=2 ./{} > {}.log 2>&1; then echo "== {}: $$(tail -n 1 {}.log)"; \
	     else cat {}.log; echo "== {}: FAILED"; exit 1; fi' \
	    || { echo "FAILED: see the == lines above"; exit 1; }

sanitize:
	$(MAKE) test BUILD=build/c-san OPT= EXTRA_CFLAGS="$(SAN_FLAGS)" EXTRA_LDFLAGS="$(SAN_FLAGS)"

clean:
	rm -rf build/c build/c-san

-include $(LIB_OBJS:.o=.d) $(TEST_BINS:=.d)
