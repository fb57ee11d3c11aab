#!/usr/bin/env bash
# Installs (Debian packages) and starts a local PostgreSQL server for the shared-storage tests,
# and prints the URL the tests read from SUITE_TEST_POSTGRES_URL.
set -euo pipefail
if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
  (apt-get install -y -q postgresql || (apt-get update -q && apt-get install -y -q postgresql)) >&2
fi
version=$(ls /usr/lib/postgresql | sort -n | tail -1)
if ! pg_lsclusters -h | grep -q .; then pg_createcluster "$version" main >&2; fi
# TCP logins need a password, checked by SCRAM (Debian's default; a `trust` line is made so): the
# launch tests check that a job given no password cannot connect.
hba=/etc/postgresql/$version/main/pg_hba.conf
if grep -qE '^host.*[[:space:]]trust[[:space:]]*$' "$hba"; then
  sed -i -E '/^host/s/[[:space:]]trust[[:space:]]*$/ scram-sha-256/' "$hba"
  pg_ctlcluster "$version" main reload >&2 || true
fi
pg_ctlcluster "$version" main start >&2 || true
for _ in $(seq 30); do pg_isready -q && break; sleep 1; done
su postgres -c "psql -tc \"SELECT 1 FROM pg_roles WHERE rolname='suite'\"" | grep -q 1 ||
  su postgres -c "psql -qc \"CREATE ROLE suite LOGIN SUPERUSER PASSWORD 'suite'\"" >&2
su postgres -c "psql -tc \"SELECT 1 FROM pg_database WHERE datname='suite_test'\"" | grep -q 1 ||
  su postgres -c "createdb -O suite suite_test" >&2
echo "postgresql://suite:suite@localhost/suite_test"
