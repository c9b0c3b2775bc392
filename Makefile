# rdma-pool-doorbell: three RDMA demo programs and their tests.
#   make                  build the programs
#   make test             unit tests, fuzzing, end-to-end tests on Soft-RoCE
#   make test SANITIZE=1  the same, every program built with ASan and UBSan
#   make demo             a server and a client on Soft-RoCE, with their output
#   make bench            the client against perftest, and the servers' CPU
#                         time: bench-results/results.md and a plot
#   make wire             server and client on two VMs joined by one virtual
#                         cable, and every packet of a session decoded:
#                         wire-results/ (WIRE_ARGS: scripts/wire.sh)
#   make fuzz             fuzz the control-message decoder (FUZZ_SECONDS=20)
#   make doctor           check this machine for what the programs need

# make splits a path at its spaces, and so do the scripts' command lines
# (the VM's kernel command line among them): refuse such a path at once,
# before any target installs, builds or boots anything.
ifneq ($(word 2,$(CURDIR)),)
$(error '$(CURDIR)' has a space in it, which make and these scripts cannot take: move or clone the project to a path without one)
endif

CC ?= cc
CFLAGS ?= -O2 -g
# rdma-core's own warning set, as errors.  -D_GNU_SOURCE gives <endian.h>'s
# htobe64() and friends, strerrorname_np() and sigabbrev_np().
WARNINGS = -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes \
	   -Wmissing-prototypes -Wformat=2
ifneq ($(SANITIZE),)
SANITIZERS = -fsanitize=address,undefined -fno-sanitize-recover=all \
	     -fno-omit-frame-pointer
endif
# (A library pkg-config cannot find: check-build names its package.)
ALL_CFLAGS = -std=c11 -D_GNU_SOURCE $(WARNINGS) -I. $(CFLAGS) $(SANITIZERS) \
	     $(shell pkg-config --cflags libibverbs librdmacm 2>/dev/null)
LIBS = $(shell pkg-config --libs libibverbs librdmacm 2>/dev/null)

PROGRAMS = rdma_pool_client rdma_pool_server rdma_srq_pool_server_ev
UNITS = tests/unit_common tests/unit_client
PEERS = tests/ctrl_peer tests/cm_probe tests/bad_server
TOOLS = $(UNITS) $(PEERS)
FUZZER = build/fuzz_ctrl_msg
FUZZ_SECONDS = 20
# Rebuild everything when the flags change (SANITIZE=1 and back).
FLAGS = build/flags

all: $(PROGRAMS) $(TOOLS)

# Without a library's development package pkg-config gives no flags, and
# the link fails on every verb: say which package is missing instead.
check-build:
	@scripts/deps.sh --check build

# The compiler line the programs are built with (scripts/with-build.sh).
flags:
	@echo '$(CC) $(ALL_CFLAGS)'

# A make as root (sudo make test) leaves build/ root's: say so, by name.
$(FLAGS): FORCE
	@mkdir -p build
	@test -w build || { echo "build/ is $$(stat -c %U build)'s, not yours to write (a make as root made it?): remove it (sudo rm -rf build) or make as $$(stat -c %U build)" >&2; exit 1; }
	@echo '$(CC) $(ALL_CFLAGS)' | cmp -s - $@ || echo '$(CC) $(ALL_CFLAGS)' >$@

# The programs, and the unit tests; the servers share the machinery of
# common/server.h, which tests/unit_common links with no server at all.
MACHINERY = $(addprefix common/,options.c reports.c admission.c device.c \
	    deadlines.c keys.c)
$(PROGRAMS) $(UNITS): %: %.c common/common.c common/common.h $(FLAGS) | check-build
	$(CC) $(ALL_CFLAGS) -o $@ $< $(filter $(MACHINERY),$^) common/common.c $(LIBS)
SERVERS = rdma_pool_server rdma_srq_pool_server_ev
$(SERVERS) tests/unit_common: $(MACHINERY) common/server.h

# The test peers: a client and a server that misbehave on purpose, and a
# probe of what rdma_cm puts on each QP; they share their CM and CQ waits
# (tests/peer.c).
$(PEERS): %: %.c tests/peer.c tests/peer.h common/common.c \
		common/common.h $(FLAGS) | check-build
	$(CC) $(ALL_CFLAGS) -o $@ $< tests/peer.c common/common.c $(LIBS)

# The client's batching, tested with the client's own source compiled in.
tests/unit_client: rdma_pool_client.c
$(UNITS): tests/tap.h

# libFuzzer comes with clang; the fuzzer checks itself with ASan and UBSan.
$(FUZZER): tests/fuzz_ctrl_msg.c common/common.c common/common.h | check-build
	@mkdir -p build
	clang -std=c11 -D_GNU_SOURCE -I. -g -O1 \
		-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
		-o $@ tests/fuzz_ctrl_msg.c common/common.c $(LIBS)

fuzz:
	scripts/deps.sh build fuzz
	$(MAKE) $(FUZZER)
	tests/fuzz.sh $(FUZZER) $(FUZZ_SECONDS)

clean:
	rm -f $(PROGRAMS) $(TOOLS)
	rm -rf build

# Each installs what it needs and this machine lacks (scripts/deps.sh, by
# purpose), then builds: the compiler flags come from pkg-config, which may
# only now be there.  What Soft-RoCE needs where it comes up (the rdma_rxe
# module, or a VM), scripts/soft-roce.sh installs when it gets there.
# A make test beside one of other flags in this checkout waits for it
# (scripts/with-build.sh).
test:
	scripts/deps.sh build run test fuzz bench wire
	FUZZER=$(FUZZER) FUZZ_SECONDS=$(FUZZ_SECONDS) SANITIZE=$(SANITIZE) \
		scripts/with-build.sh "all $(FUZZER)" tests/run.sh

demo:
	scripts/deps.sh build run
	scripts/with-build.sh all scripts/soft-roce.sh scripts/demo.sh

# A measurement, not a test (make test runs a small version of it).
bench:
	scripts/deps.sh build run bench
	scripts/with-build.sh all scripts/soft-roce.sh scripts/bench.sh '$(CURDIR)/bench-results'
	@cat bench-results/results.md

# Two VMs, one cable, one short session: the trace of every packet.
wire:
	scripts/deps.sh build run wire
	scripts/with-build.sh all scripts/wire.sh $(WIRE_ARGS)

# What building and running by hand need (PURPOSES="..." for more, see
# scripts/deps.sh).
deps:
	scripts/deps.sh $(PURPOSES)

# Needs no build: it checks the machine, not the programs.
doctor:
	scripts/doctor.sh

.PHONY: all clean test demo bench wire deps fuzz doctor check-build flags FORCE
