# Environment for running this repository's Airflow on one machine: SQLite, LocalExecutor, loopback only.
#
#   source scripts/airflow_env.sh            # then: airflow dags list, airflow dags test corpus_build, …
#
# AIRFLOW_HOME defaults to out/airflow (git-ignored); the DAGs are dags/; runs go to out/runs/. Every server
# started with these settings listens on 127.0.0.1: the API server (UI, REST, Execution API) on
# $DRIPPER_AIRFLOW_PORT (8080). Start the parts yourself rather than `airflow standalone`, whose log servers
# bind to all interfaces:
#   airflow api-server --host 127.0.0.1 --port "$DRIPPER_AIRFLOW_PORT"
#   airflow scheduler --skip-serve-logs
#   airflow dag-processor
#   airflow triggerer --skip-serve-logs
# (scripts/airflow_demo.py does this.) The UI login is admin; its password is in
# $AIRFLOW_HOME/simple_auth_manager_passwords.json.generated.

_dripper_script="${BASH_SOURCE[0]:-$0}"
DRIPPER_REPO="$(cd "$(dirname "$_dripper_script")/.." && pwd)"
export DRIPPER_REPO
unset _dripper_script

export AIRFLOW_HOME="${AIRFLOW_HOME:-$DRIPPER_REPO/out/airflow}"
export DRIPPER_AIRFLOW_PORT="${DRIPPER_AIRFLOW_PORT:-8080}"
mkdir -p "$AIRFLOW_HOME"

# Airflow starts its subcommands as a bare `airflow`: the venv's bin/ must be on PATH.
case ":$PATH:" in
  *":$DRIPPER_REPO/.venv/bin:"*) ;;
  *) export PATH="$DRIPPER_REPO/.venv/bin:$PATH" ;;
esac

# Secrets shared by the API server and the scheduler (task tokens, sessions), made once per AIRFLOW_HOME.
_dripper_secret() {
  local file="$AIRFLOW_HOME/$1"
  if [ ! -s "$file" ]; then
    (umask 077 && od -An -N32 -tx1 /dev/urandom | tr -d ' \n' >"$file")
  fi
  cat "$file"
}

export AIRFLOW__CORE__DAGS_FOLDER="$DRIPPER_REPO/dags"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__CORE__EXECUTOR=LocalExecutor
export AIRFLOW__CORE__PARALLELISM="${AIRFLOW__CORE__PARALLELISM:-3}"
export AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION=True
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS="${AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS:-admin:admin}"
export AIRFLOW__CORE__EXECUTION_API_SERVER_URL="http://127.0.0.1:$DRIPPER_AIRFLOW_PORT/execution/"
# The metadata database: SQLite in AIRFLOW_HOME unless set (PostgreSQL at scale:
# postgresql+psycopg2://USER:PASSWORD@HOST:5432/airflow, with the `airflow` extra's psycopg2).
export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="${AIRFLOW__DATABASE__SQL_ALCHEMY_CONN:-sqlite:///$AIRFLOW_HOME/airflow.db}"
export AIRFLOW__API__HOST=127.0.0.1
export AIRFLOW__API__PORT="$DRIPPER_AIRFLOW_PORT"
export AIRFLOW__API__BASE_URL="http://127.0.0.1:$DRIPPER_AIRFLOW_PORT"
export AIRFLOW__API__WORKERS=1
export AIRFLOW__API__SECRET_KEY="$(_dripper_secret api_secret_key)"
export AIRFLOW__API_AUTH__JWT_SECRET="$(_dripper_secret jwt_secret)"
export AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK=False
export AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL=20
export AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL=30
export AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES=1
export AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT="${AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT:-8793}"
export AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT="${AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT:-8794}"
unset -f _dripper_secret

# The platform's own defaults (see dags/_common.py): the bundled sample snapshot, local runs, no network.
# The storage root: runs go to its runs/ (out/runs/CC-MAIN-…), crawl manifests to its crawls/.
export DRIPPER_RUN_ROOT="${DRIPPER_RUN_ROOT:-$DRIPPER_REPO/out}"
export DRIPPER_CRAWL_INDEX="${DRIPPER_CRAWL_INDEX:-$DRIPPER_REPO/data/sample/collinfo.json}"
export DRIPPER_CRAWL_BASE="${DRIPPER_CRAWL_BASE:-$DRIPPER_REPO/data/sample}"
export DRIPPER_CRAWL_ID="${DRIPPER_CRAWL_ID:-CC-MAIN-SAMPLE}"
export DRIPPER_DASK_WORKERS="${DRIPPER_DASK_WORKERS:-2}"
# A trigger with no WARC count takes 2 files of the sample (a real crawl with none is refused).
export DRIPPER_WARC_COUNT="${DRIPPER_WARC_COUNT:-2}"
# The tokenizer the forms propose (the ablation needs one): Qwen's where `make install` built it, else the
# small one the demo trains on the sample (scripts/airflow_demo.py demo_tokenizer).
if [ -z "${DRIPPER_TOKENIZER:-}" ]; then
  for _dripper_tokenizer in "$DRIPPER_REPO/.cache/models/qwen-tokenizer" "$(dirname "$AIRFLOW_HOME")/demo-tokenizer"; do
    if [ -f "$_dripper_tokenizer/tokenizer.json" ]; then
      export DRIPPER_TOKENIZER="$_dripper_tokenizer"
      break
    fi
  done
  unset _dripper_tokenizer
fi
export HF_HUB_OFFLINE=1
# Benchmark data only from the local cache: a suite whose data is not there fails its check at once.
export HF_DATASETS_OFFLINE=1
export TOKENIZERS_PARALLELISM=false
