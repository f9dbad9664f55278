#!/usr/bin/env bash
# Install kernelwatch on a bare-metal (GPU) host: a virtual environment, the package,
# and systemd units with one worker per GPU. Safe to re-run: it converges on the same
# state, rewrites only files whose content changed and never overwrites an existing
# environment file unless --env-file is given.
#
# Nothing from the command line or the environment file is ever evaluated by a shell:
# values are passed as single arguments, and what ends up inside unit files is
# validated against a strict character set first.
set -euo pipefail
umask 022

SCRIPT_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)"
readonly SCRIPT_DIR
readonly UNIT_SRC="$SCRIPT_DIR/systemd"
readonly WORKER_TEMPLATE="kernelwatch-worker@.service"
readonly WORKER_CPU="kernelwatch-worker-cpu.service"
readonly API_UNIT="kernelwatch-api.service"
readonly DASHBOARD_UNIT="kernelwatch-dashboard.service"
readonly BEAT_UNIT="kernelwatch-beat.service"
readonly WANTED_BY="multi-user.target"

prefix=/opt/kernelwatch
source_dir="$(dirname -- "$SCRIPT_DIR")"
wheelhouse=""
env_file=""
systemd_dir=/etc/systemd/system
config_dir=/etc/kernelwatch
use_systemctl=1
gpus=auto
queues=""
migrate=0
restart=0
python_bin=python3
system_site_packages=0
service_user=kernelwatch
enable_api=0
enable_dashboard=0
enable_beat=0

usage() {
    cat <<'USAGE'
Usage: install-gpu-host.sh [options]

  --prefix DIR            install root; the venv is DIR/venv       (/opt/kernelwatch)
  --source DIR            project source to `pip install`     (this repository)
  --wheelhouse DIR        install offline from DIR (build-wheelhouse.sh output):
                          pip install --no-index --find-links DIR; checks SHA256SUMS
  --env-file FILE         install FILE as CONFIG_DIR/env (replaces the old one)
  --config-dir DIR        where the environment file lives          (/etc/kernelwatch)
  --systemd-dir DIR       where unit files are written       (/etc/systemd/system)
  --no-systemctl          write units and enable them by symlink only (tests, images)
  --gpus N|auto           worker units to install; auto = GPUs listed by nvidia-smi;
                          0 installs one cpu-queue worker                  (auto)
  --queues Q[,Q...]       queues of the GPU workers (e.g. gpu.h200); default: the
                          worker derives its queue from its GPU
  --python PATH           interpreter for the venv                         (python3)
  --system-site-packages  let the venv see the host's torch/triton (CUDA builds)
  --user NAME             service account, created if missing          (kernelwatch)
  --enable-api            also enable and start kernelwatch-api
  --enable-dashboard      also enable and start kernelwatch-dashboard
  --enable-beat           also enable and start kernelwatch-beat (scheduled runs; one per fleet)
  --migrate               run `kernelwatch db upgrade` with the environment file
  --restart               restart units that are already running (waits for the
                          running measurement: up to TimeoutStopSec)
  -h, --help              this text
USAGE
}

die() { printf 'install-gpu-host: error: %s\n' "$*" >&2; exit 2; }
log() { printf 'install-gpu-host: %s\n' "$*"; }
warn() { printf 'install-gpu-host: warning: %s\n' "$*" >&2; }

# A path that is written into unit files: absolute, and only characters that need no
# quoting there (no spaces, %, $, quotes, backslashes or newlines).
check_unit_path() {
    local name=$1 value=$2
    [[ $value =~ ^/[A-Za-z0-9._+/-]*$ ]] ||
        die "$name must be an absolute path of [A-Za-z0-9._+/-] characters: ${value@Q}"
}

# An existing directory or file given on the command line, made absolute so that it can
# never be taken for an option by the commands it is passed to.
absolute() {
    local kind=$1 value=$2
    case $kind in
        dir) [[ -d $value ]] || die "not a directory: ${value@Q}"
             (cd -- "$value" && pwd -P) ;;
        file) [[ -f $value ]] || die "not a file: ${value@Q}"
              printf '%s/%s\n' "$(cd -- "$(dirname -- "$value")" && pwd -P)" \
                  "$(basename -- "$value")" ;;
    esac
}

while (($#)); do
    opt=$1
    value=""
    if [[ $opt == --*=* ]]; then
        value=${opt#*=}
        opt=${opt%%=*}
        set -- "$opt" "$value" "${@:2}"
    fi
    case $opt in
        --prefix|--source|--wheelhouse|--env-file|--config-dir|--systemd-dir|--gpus|\
        --queues|--python|--user)
            (($# >= 2)) || die "$opt needs a value"
            value=$2
            shift 2
            case $opt in
                --prefix) prefix=$value ;;
                --source) source_dir=$value ;;
                --wheelhouse) wheelhouse=$value ;;
                --env-file) env_file=$value ;;
                --config-dir) config_dir=$value ;;
                --systemd-dir) systemd_dir=$value ;;
                --gpus) gpus=$value ;;
                --queues) queues=$value ;;
                --python) python_bin=$value ;;
                --user) service_user=$value ;;
            esac
            ;;
        --no-systemctl) use_systemctl=0; shift ;;
        --system-site-packages) system_site_packages=1; shift ;;
        --enable-api) enable_api=1; shift ;;
        --enable-dashboard) enable_dashboard=1; shift ;;
        --enable-beat) enable_beat=1; shift ;;
        --migrate) migrate=1; shift ;;
        --restart) restart=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument: ${opt@Q}" ;;
    esac
done

# ------------------------------------------------------------------ validate inputs
check_unit_path --prefix "$prefix"
check_unit_path --config-dir "$config_dir"
check_unit_path --systemd-dir "$systemd_dir"
prefix=${prefix%/}; config_dir=${config_dir%/}; systemd_dir=${systemd_dir%/}
[[ -n $prefix && -n $config_dir && -n $systemd_dir ]] || die "/ is not a valid directory here"
[[ $service_user =~ ^[a-z_][a-z0-9_-]{0,31}$ ]] || die "--user: not a user name: ${service_user@Q}"
[[ -z $queues || $queues =~ ^[A-Za-z0-9_][A-Za-z0-9._,-]*$ ]] ||
    die "--queues: comma-separated queue names of [A-Za-z0-9._-]: ${queues@Q}"
[[ $gpus == auto || $gpus =~ ^[0-9]{1,3}$ ]] || die "--gpus: a number or auto: ${gpus@Q}"
command -v -- "$python_bin" >/dev/null || die "--python: not found: ${python_bin@Q}"
[[ -d $UNIT_SRC ]] || die "unit templates not found in $UNIT_SRC"

if [[ -n $wheelhouse ]]; then
    wheelhouse=$(absolute dir "$wheelhouse")
else
    source_dir=$(absolute dir "$source_dir")
    [[ -f $source_dir/pyproject.toml || -f $source_dir/setup.py ]] ||
        die "--source: no pyproject.toml in ${source_dir@Q}"
fi
[[ -z $env_file ]] || env_file=$(absolute file "$env_file")

if [[ $gpus == auto ]]; then
    if command -v nvidia-smi >/dev/null; then
        # `nvidia-smi -L` lists one "GPU i: ..." line per GPU (MIG devices are indented
        # lines under it and are not counted). A failing nvidia-smi is an error, not 0.
        listing=$(nvidia-smi -L) || die "nvidia-smi -L failed: is the driver loaded?"
        gpus=$(grep -c '^GPU ' <<<"$listing" || true)
    else
        warn "nvidia-smi not found: installing a cpu worker (use --gpus N to override)"
        gpus=0
    fi
fi
gpus=$((10#$gpus))
if ((gpus > 0)); then
    log "prefix $prefix: $gpus GPU worker(s)"
else
    log "prefix $prefix: no GPU, one cpu-queue worker"
fi

if ((use_systemctl)); then
    [[ $EUID -eq 0 ]] || die "run as root, or pass --no-systemctl to only write files"
    command -v systemctl >/dev/null || die "systemctl not found (use --no-systemctl)"
fi

mkdir -p -- "$prefix"
if command -v flock >/dev/null; then
    exec 9>"$prefix/.install.lock"
    flock -n 9 || die "another install-gpu-host.sh is running on $prefix"
fi

# ------------------------------------------------------------------ service account
if ((use_systemctl)) && ! id -u -- "$service_user" >/dev/null 2>&1; then
    log "creating system user $service_user"
    useradd --system --user-group --home-dir /var/lib/kernelwatch \
        --shell /usr/sbin/nologin -- "$service_user"
fi

# ------------------------------------------------------------------ venv + package
venv="$prefix/venv"
if [[ ! -x $venv/bin/python ]]; then
    log "creating virtual environment $venv"
    venv_args=()
    ((system_site_packages)) && venv_args+=(--system-site-packages)
    "$python_bin" -m venv "${venv_args[@]}" -- "$venv"
else
    log "reusing virtual environment $venv"
    want=false; ((system_site_packages)) && want=true
    grep -qx "include-system-site-packages = $want" "$venv/pyvenv.cfg" ||
        warn "$venv was made with another --system-site-packages setting; remove it to change"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check)

# --system-site-packages only reaches the *base* interpreter's packages. When --python
# is itself a virtual environment (GPU images often keep torch in one, e.g.
# /opt/torch/.venv), a .pth file adds that environment's site-packages after the venv's
# own, so pip and the worker see its torch and triton.
host_pth=""
if ((system_site_packages)); then
    mapfile -t parent_paths < <("$python_bin" -c '
import sys, sysconfig
if sys.prefix != sys.base_prefix:
    for path in dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib")):
        print(path)')
    for path in "${parent_paths[@]}"; do
        [[ $path == /* && $path != *$'\n'* ]] || die "unexpected site-packages path: ${path@Q}"
    done
    if ((${#parent_paths[@]})); then
        venv_site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
        host_pth="$venv_site/kernelwatch-host-packages.pth"
        if [[ ! -f $host_pth ]] || [[ $(<"$host_pth") != "$(printf '%s\n' "${parent_paths[@]}")" ]]; then
            printf '%s\n' "${parent_paths[@]}" >"$host_pth"
            log "venv also sees ${parent_paths[*]} (from $python_bin)"
        fi
    fi
fi

if [[ -n $wheelhouse ]]; then
    if [[ -f $wheelhouse/SHA256SUMS ]]; then
        log "checking $wheelhouse/SHA256SUMS"
        (cd -- "$wheelhouse" && sha256sum --check --strict --quiet SHA256SUMS) ||
            die "wheelhouse does not match its SHA256SUMS"
    else
        warn "no SHA256SUMS in the wheelhouse: files not verified"
    fi
    log "installing kernelwatch from $wheelhouse (offline)"
    "${pip[@]}" install --no-index --find-links "$wheelhouse" "kernelwatch[gpu]"
    # The same version may have been rebuilt: always take the wheelhouse's copy.
    "${pip[@]}" install --no-index --find-links "$wheelhouse" --no-deps --force-reinstall \
        kernelwatch
else
    log "installing kernelwatch from $source_dir"
    "${pip[@]}" install -- "${source_dir}[gpu]"
fi
[[ -x $venv/bin/kernelwatch ]] || die "the package installed no kernelwatch command"

# ------------------------------------------------------------------ environment file
mkdir -p -- "$config_dir"
env_target="$config_dir/env"
install_env() {
    local src=$1 tmp
    tmp=$(mktemp -- "$env_target.XXXXXX")
    cat -- "$src" >"$tmp"
    chmod 0640 -- "$tmp"
    if ((use_systemctl)); then chown "root:$service_user" -- "$tmp"; fi
    mv -f -- "$tmp" "$env_target"
}
if [[ -n $env_file ]]; then
    if [[ -f $env_target ]] && cmp -s -- "$env_file" "$env_target"; then
        log "$env_target is up to date"
    else
        log "installing $env_target"
        install_env "$env_file"
    fi
elif [[ ! -f $env_target ]]; then
    warn "no --env-file: installed $env_target from .env.example; edit its secrets"
    install_env "$SCRIPT_DIR/.env.example"
else
    log "keeping $env_target"
fi

# The worker confines code under test with bubblewrap and refuses to run it without
# (worker/sandbox.py fails closed): a host without bwrap would fail every run. The
# mode is read from the environment file as data (the last KW_SANDBOX= line wins).
sandbox_mode=$(sed -n 's/^KW_SANDBOX=//p' -- "$env_target" | tail -n 1 | tr -d "\"' " | tr '[:upper:]' '[:lower:]')
if [[ ${sandbox_mode:-bwrap} != none ]] && ! command -v bwrap >/dev/null; then
    die "bubblewrap (bwrap) is not installed, and the worker runs code under test inside it" \
        "(KW_SANDBOX=${sandbox_mode:-bwrap} in $env_target, docs/security.md):" \
        "apt-get install bubblewrap, or set KW_SANDBOX=none for trusted code only"
fi

# ------------------------------------------------------------------ unit files
mkdir -p -- "$systemd_dir" "$systemd_dir/$WANTED_BY.wants"
units_changed=0

# Render a unit template: default paths and account replaced by the validated values.
# Bash's own replacement, quoted, so that no character of a value is special.
render_unit() {
    local name=$1 text line out=""
    text=$(<"$UNIT_SRC/$name")
    text=${text//"/etc/kernelwatch/env"/"$config_dir/env"}
    text=${text//"/opt/kernelwatch"/"$prefix"}
    while IFS= read -r line; do
        case $line in
            User=kernelwatch) line="User=$service_user" ;;
            Group=kernelwatch) line="Group=$service_user" ;;
            Environment=WORKER_ARGS=) [[ -z $queues ]] || line="Environment=\"WORKER_ARGS=--queues $queues\"" ;;
        esac
        out+="$line"$'\n'
    done <<<"$text"
    printf '%s' "$out"
}

write_unit() {
    local name=$1 target="$systemd_dir/$1" tmp
    tmp=$(mktemp -- "$systemd_dir/.$name.XXXXXX")
    render_unit "$name" >"$tmp"
    chmod 0644 -- "$tmp"
    if [[ -f $target ]] && cmp -s -- "$tmp" "$target"; then
        rm -f -- "$tmp"
    else
        mv -f -- "$tmp" "$target"
        units_changed=1
        log "wrote $target"
    fi
}

for unit in "$WORKER_TEMPLATE" "$WORKER_CPU" "$API_UNIT" "$DASHBOARD_UNIT" "$BEAT_UNIT"; do
    write_unit "$unit"
done

# Units this host should run, as (instance name, file the instance comes from).
desired=()
if ((gpus > 0)); then
    for ((i = 0; i < gpus; i++)); do desired+=("kernelwatch-worker@$i.service"); done
else
    desired+=("$WORKER_CPU")
fi
((enable_api)) && desired+=("$API_UNIT")
((enable_dashboard)) && desired+=("$DASHBOARD_UNIT")
((enable_beat)) && desired+=("$BEAT_UNIT")

is_desired() {
    local u
    for u in "${desired[@]}"; do [[ $u == "$1" ]] && return 0; done
    return 1
}

# Worker units enabled before but not wanted now (fewer GPUs, GPU <-> cpu): disable.
stale=()
shopt -s nullglob
for link in "$systemd_dir/$WANTED_BY.wants"/kernelwatch-worker*.service; do
    unit=$(basename -- "$link")
    is_desired "$unit" || stale+=("$unit")
done
shopt -u nullglob

unit_file_of() {
    case $1 in
        kernelwatch-worker@*.service) printf '%s\n' "$WORKER_TEMPLATE" ;;
        *) printf '%s\n' "$1" ;;
    esac
}

if ((use_systemctl)); then
    ((units_changed)) && systemctl daemon-reload
    if ((${#stale[@]})); then
        log "disabling ${stale[*]}"
        systemctl disable --now -- "${stale[@]}"
    fi
    log "enabling ${desired[*]}"
    systemctl enable --now -- "${desired[@]}"
    if ((restart)); then
        log "restarting ${desired[*]} (waits for running measurements)"
        systemctl restart -- "${desired[@]}"
    elif ((units_changed)); then
        log "units changed: running services keep the old ones until restarted (--restart)"
    fi
else
    # What `systemctl enable` would do: a symlink in the target's .wants directory.
    for unit in "${stale[@]}"; do
        rm -f -- "$systemd_dir/$WANTED_BY.wants/$unit"
        log "disabled $unit (symlink removed)"
    done
    for unit in "${desired[@]}"; do
        ln -sfn -- "../$(unit_file_of "$unit")" "$systemd_dir/$WANTED_BY.wants/$unit"
    done
    log "enabled by symlink: ${desired[*]} (systemctl not called)"
fi

# ------------------------------------------------------------------ migrations
if ((migrate)); then
    # Read KEY=VALUE lines ourselves (never `source` the file): each becomes one
    # argument of env(1), so a value is data, never shell code.
    env_args=()
    while IFS= read -r line || [[ -n $line ]]; do
        [[ $line =~ ^[[:space:]]*(#|$) ]] && continue
        [[ $line =~ ^([A-Za-z_][A-Za-z0-9_]*)=(.*)$ ]] || {
            warn "ignoring a line of $env_target that is not KEY=VALUE"
            continue
        }
        key=${BASH_REMATCH[1]} val=${BASH_REMATCH[2]}
        if [[ $val =~ ^\"(.*)\"$ || $val =~ ^\'(.*)\'$ ]]; then val=${BASH_REMATCH[1]}; fi
        env_args+=("$key=$val")
    done <"$env_target"
    run_as=()
    if ((use_systemctl)) && [[ $EUID -eq 0 ]]; then
        run_as=(runuser -u "$service_user" --)
        install -d -o "$service_user" -g "$service_user" -m 0750 /var/lib/kernelwatch
    fi
    log "running kernelwatch db upgrade"
    "${run_as[@]}" env -i "PATH=$venv/bin:/usr/bin:/bin" "HOME=${HOME:-/}" \
        KW_DATA_DIR=/var/lib/kernelwatch "${env_args[@]}" "$venv/bin/kernelwatch" db upgrade
fi

log "done: $venv/bin/kernelwatch; units in $systemd_dir; config $env_target"
