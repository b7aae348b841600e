# The commands of the README. `make test` is what CI runs (.ci/run).
CARGO ?= cargo
PREFIX ?= /usr/local

.PHONY: setup test bench header install demo

setup:
	scripts/setup.sh

# Installs anything missing, checks formatting, lints and that the API docs build with no
# broken or private link, builds everything (the C tests link the libnam.so this makes;
# --all-targets builds the dependencies once, with the features the tests' dev-dependencies
# add), then runs every test binary, reporting every failure (--no-fail-fast: one failing
# binary does not hide the ones after it).
test:
	scripts/setup.sh --deps-only
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --workspace --no-deps --lib
	$(CARGO) build --workspace --all-targets
	$(CARGO) test --workspace --no-fail-fast
	.venv/bin/maturin develop -q -m python/Cargo.toml
	.venv/bin/python -m pytest -q python/tests

# Benchmarks with their baselines measured in the same run; writes docs/benchmarks.md.
bench:
	bench/run.sh

# Regenerates include/nam.h from the C API (a test fails while it is stale).
header:
	NAM_UPDATE_HEADER=1 $(CARGO) test -p nam-capi --test header

install:
	$(CARGO) build --release -p nam-capi -p nam-cli
	install -Dm644 include/nam.h $(PREFIX)/include/nam.h
	install -Dm755 target/release/libnam.so $(PREFIX)/lib/libnam.so
	install -Dm644 target/release/libnam.a $(PREFIX)/lib/libnam.a
	install -Dm755 target/release/nam $(PREFIX)/bin/nam
	scripts/gen-pc.sh $(PREFIX) $(PREFIX)/lib/pkgconfig

demo:
	$(CARGO) run --release -p nam-cli -- demo
