#!/bin/sh
# Entry point of the Airflow image: `dripper-airflow SUBCOMMAND...` runs `airflow SUBCOMMAND...`.
#
# With Airflow 3's default SimpleAuthManager, the API server reads each user's password from a JSON file
# and makes up (and logs) one for a user it does not find there. When AIRFLOW_ADMIN_PASSWORD is set, this
# writes that file first, so the admin's password is the configured one.
set -eu

if [ -n "${AIRFLOW_ADMIN_PASSWORD:-}" ]; then
    passwords_file="${AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE:-${AIRFLOW_HOME}/simple_auth_manager_passwords.json.generated}"
    umask 077
    python - "$passwords_file" <<'EOF'
import json
import os
import sys

with open(sys.argv[1], "w", encoding="utf-8") as passwords:
    json.dump({os.environ.get("AIRFLOW_ADMIN_USERNAME", "admin"): os.environ["AIRFLOW_ADMIN_PASSWORD"]}, passwords)
EOF
fi

exec airflow "$@"
