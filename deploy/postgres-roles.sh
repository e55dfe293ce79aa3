#!/bin/sh
# Run once by the postgres image when it first initialises its data directory
# (/docker-entrypoint-initdb.d), as its superuser: the owner that migrates settle's schema (not a
# superuser), the runtime roles (README.md, Database roles) and one login role for each, every
# password from the environment (deploy/compose.yaml refuses to start without them).
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
    -v owner_password="$OWNER_DB_PASSWORD" \
    -v ingress_password="$INGRESS_DB_PASSWORD" \
    -v worker_password="$WORKER_DB_PASSWORD" \
    -v console_password="$CONSOLE_DB_PASSWORD" <<'SQL'
CREATE ROLE settle_owner LOGIN PASSWORD :'owner_password';
ALTER DATABASE settle OWNER TO settle_owner;
ALTER SCHEMA public OWNER TO settle_owner;
CREATE ROLE settle_ingress NOLOGIN;
CREATE ROLE settle_worker NOLOGIN;
CREATE ROLE settle_console NOLOGIN;
CREATE ROLE settle_ingress_login LOGIN PASSWORD :'ingress_password' IN ROLE settle_ingress;
CREATE ROLE settle_worker_login LOGIN PASSWORD :'worker_password' IN ROLE settle_worker;
CREATE ROLE settle_console_login LOGIN PASSWORD :'console_password' IN ROLE settle_console;
SQL
