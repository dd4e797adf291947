# The torch-tpu C library and its unit tests. No PyTorch needed.
#
#   make            build build/c/libtpu.a and every test binary
#   make test       run every test (TORCH_TPU_CHIPS=2, so multi-chip paths run)
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

# Runs every test even if one fails, then fails if any did.
test: all
	@failed=""; \
	for t in $(TEST_BINS); do \
	    echo "== $$t"; \
	    TORCH_TPU_CHIPS=2 ./$$t || failed="$$failed $$t"; \
	done; \
	if [ -n "$$failed" ]; then echo "FAILED:$$failed"; exit 1; fi

sanitize:
	$(MAKE) test BUILD=build/c-san OPT= EXTRA_CFLAGS="$(SAN_FLAGS)" EXTRA_LDFLAGS="$(SAN_FLAGS)"

clean:
	rm -rf build/c build/c-san

-include $(LIB_OBJS:.o=.d) $(TEST_BINS:=.d)
