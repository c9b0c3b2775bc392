# rdma-pool-doorbell: three RDMA demo programs and their tests.
#   make          build the programs
#   make test     unit tests, then end-to-end tests on Soft-RoCE
#   make demo     a server and a client on Soft-RoCE, with their output

CC ?= cc
CFLAGS ?= -O2 -g
# rdma-core's own warning set, as errors.  -D_GNU_SOURCE gives <endian.h>'s
# htobe64() and friends, strerrorname_np() and sigabbrev_np().
WARNINGS = -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes \
	   -Wmissing-prototypes -Wformat=2
ALL_CFLAGS = -std=c11 -D_GNU_SOURCE $(WARNINGS) -I. $(CFLAGS) \
	     $(shell pkg-config --cflags libibverbs librdmacm)
LIBS = $(shell pkg-config --libs libibverbs librdmacm)

PROGRAMS = rdma_pool_client rdma_pool_server rdma_srq_pool_server_ev
UNIT = tests/unit_common
PEER = tests/ctrl_peer

all: $(PROGRAMS) $(UNIT) $(PEER)

$(PROGRAMS): %: %.c common/common.c common/common.h
	$(CC) $(ALL_CFLAGS) -o $@ $< common/common.c $(LIBS)

# Test tools: the unit tests, and a client that misbehaves on purpose.
$(UNIT) $(PEER): %: %.c common/common.c common/common.h
	$(CC) $(ALL_CFLAGS) -o $@ $< common/common.c $(LIBS)

clean:
	rm -f $(PROGRAMS) $(UNIT) $(PEER)
	rm -rf build

# Both install what is missing first (scripts/deps.sh), then build: the
# compiler flags come from pkg-config, which may only now be there.
test: deps
	$(MAKE) all
	tests/run.sh

demo: deps
	$(MAKE) all
	scripts/soft-roce.sh scripts/demo.sh

deps:
	scripts/deps.sh

.PHONY: all clean test demo deps
