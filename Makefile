# The two commands a newcomer needs:  make demo   and   make test
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
AZURITE := dev/node_modules/.bin/azurite-blob

.PHONY: install demo test test-ready unit lint docs bench console

# uv installs the same versions as pip from PyPI in ~4 s against pip's ~28 s (a fresh
# clone here, both with their caches warm); unlike pip it reads no pip.conf, and it
# byte-compiles only when asked: where PYTHONDONTWRITEBYTECODE is set (this project's CI)
# nothing would write the .pyc files later, and every fresh interpreter would compile
# asyncpg, pyarrow and the rest from source.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q uv
	$(VENV)/bin/uv pip install -q --compile-bytecode --python $(PY) -e '.[dev]'
	touch $@

$(AZURITE): dev/package.json dev/package-lock.json
	cd dev && npm ci --prefer-offline --no-audit --no-fund --loglevel=error
	touch $@

install: $(STAMP) $(AZURITE)

# For the tests: the 1.12.0 wheel's driver library, which writes NULL array elements back
# as "" and 0; doctor and restore must refuse it (tests/integration/test_driver.py).
FLAWED_DRIVER := dev/flawed-driver/libadbc_driver_postgresql.so
$(FLAWED_DRIVER): $(STAMP)
	rm -rf dev/flawed-driver && mkdir -p dev/flawed-driver
	$(PY) -m pip download -q --no-deps --only-binary :all: -d dev/flawed-driver 'adbc-driver-postgresql==1.12.0'
	$(PY) -c 'import glob, sys, zipfile; wheel = zipfile.ZipFile(glob.glob("dev/flawed-driver/*.whl")[0]); open(sys.argv[1], "wb").write(wheel.read("adbc_driver_postgresql/libadbc_driver_postgresql.so"))' $@

# For the console's browser tests: Debian's chromium, driven by Playwright (no browser is
# ever downloaded by Playwright). Installed with apt when missing (root, or sudo).
CHROMIUM := /usr/bin/chromium
$(CHROMIUM):
	$$( [ "$$(id -u)" = 0 ] || echo sudo ) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null

# The reverse proxy the console's sub-path test puts in front of it: Debian's nginx
# (only its binary is used; the test writes its own configuration).
NGINX := /usr/sbin/nginx
$(NGINX): | $(CHROMIUM)  # one apt-get at a time
	$$( [ "$$(id -u)" = 0 ] || echo sudo ) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q nginx-light >/dev/null

lint: $(STAMP)
	$(VENV)/bin/ruff check archiver tests bench
	$(VENV)/bin/ruff format --check archiver tests bench
	$(VENV)/bin/mypy

# The documentation site, built into build/site; --strict: a broken link or anchor fails.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet --site-dir build/site

# The whole suite: lint, the docs, then pytest against a real PostgreSQL and Azurite: a
# cluster of the suite's own from the machine's initdb, its files in memory (/dev/shm):
# a test's CREATE DATABASE costs ~19 ms of CPU there, ~250 ms on this machine's disk
# (archiver/testing/cluster.py). ARCHIVER_TEST_ADMIN_URL=... make test uses that server.
# Four pytest processes (pytest-xdist): each test makes its own database and container,
# each process its own template database and Azurite. The tests wait on the services and
# processes they start: two left the two cores 31% idle over a run, four 6%
# (docs/development.md). TEST_WORKERS=0 runs them in one.
# The 25 slowest tests are listed at the end: where the suite's time goes, on every run.
# What the tests need is made first, side by side (npm's ~15 s of unpacking Azurite
# beside the venv, lint and the docs): `make -j` inside, so a plain `make test` has it.
TEST_WORKERS ?= 4
test:
	$(MAKE) --no-print-directory -j4 --output-sync=target test-ready
	$(PY) -m archiver.testing.cluster -- $(PY) -m pytest -n $(TEST_WORKERS) --dist worksteal --durations=25

# For archiver serve's client tests: Debian's pgjdbc, compiled against and run by the
# machine's Java (a JDK from Debian where there is none).
JDBC := /usr/share/java/postgresql.jar
$(JDBC): | $(NGINX)  # one apt-get at a time
	$$( [ "$$(id -u)" = 0 ] || echo sudo ) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q libpostgresql-jdbc-java $$(command -v javac >/dev/null || echo default-jdk-headless) >/dev/null

# archiver serve's Python clients in an environment of their own (SQLAlchemy, pandas:
# tests/clients/requirements.txt says why apart)
CLIENTS := dev/clients-venv/.installed
$(CLIENTS): tests/clients/requirements.txt $(STAMP)
	$(PYTHON) -m venv dev/clients-venv
	$(VENV)/bin/uv pip install -q --python dev/clients-venv/bin/python -r tests/clients/requirements.txt
	touch $@

test-ready: install lint docs $(FLAWED_DRIVER) $(CHROMIUM) $(NGINX) $(JDBC) $(CLIENTS)

# The fast tier alone: no PostgreSQL, no Azurite.
unit: $(STAMP)
	$(PY) -m pytest tests/unit

# End to end: seed an orders table, archive its old rows to Azurite with two workers.
demo: install
	ARCHIVER_TEST_ADMIN_URL="$$(dev/postgres.sh)" dev/demo.sh

# The web console over the demo's (or any) queue database, on http://127.0.0.1:8080
console: install
	ARCHIVER_DATABASE_URL="$${ARCHIVER_DATABASE_URL:-$$(dev/postgres.sh)}" \
	ARCHIVER_CONSOLE_PUBLIC_READ="$${ARCHIVER_CONSOLE_PUBLIC_READ:-true}" $(VENV)/bin/archiver console

bench: install
	ARCHIVER_TEST_ADMIN_URL="$$(dev/postgres.sh)" $(PY) -m bench.run $(BENCH_ARGS)
