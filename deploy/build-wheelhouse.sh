#!/usr/bin/env bash
# Build an offline wheelhouse for a GPU host that has no network (air-gapped clusters,
# the H200 test machine): the kernelwatch wheel plus binary wheels of its dependencies
# for the host's Python and platform, and a SHA256SUMS manifest that
# install-gpu-host.sh --wheelhouse checks before installing.
#
#   deploy/build-wheelhouse.sh --out dist/wheelhouse                 # CPython 3.12
#   deploy/install-gpu-host.sh --wheelhouse /media/wheelhouse ...    # on the host
#
# torch (and triton, which comes with it) are left out unless --with-torch: GPU hosts
# take them from their CUDA image or the vendor's wheelhouse; give the venv access with
# install-gpu-host.sh --system-site-packages.
set -euo pipefail
umask 022

SCRIPT_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)"
readonly SCRIPT_DIR

out=""
python_version=3.12
platform=manylinux_2_28_x86_64
with_torch=0
torch_spec=torch
torch_index_url=""
source_dir="$(dirname -- "$SCRIPT_DIR")"
python_bin=""
clean=0

usage() {
    cat <<'USAGE'
Usage: build-wheelhouse.sh --out DIR [options]

  --out DIR               where the wheels and SHA256SUMS go (created)
  --python-version X.Y    target CPython version                            (3.12)
  --platform TAG          target platform tag; manylinux_2_N_ARCH also accepts the
                          older manylinux tags it is compatible with
                                                           (manylinux_2_28_x86_64)
  --with-torch            also download torch (several GB with its CUDA wheels)
  --torch-spec SPEC       torch requirement with --with-torch                (torch)
  --torch-index-url URL   index for torch, e.g. https://download.pytorch.org/whl/cu128
  --source DIR            project to build                     (this repository)
  --python PATH           interpreter running pip          (pythonX.Y, else python3)
  --clean                 empty --out first
  -h, --help              this text
USAGE
}

die() { printf 'build-wheelhouse: error: %s\n' "$*" >&2; exit 2; }
log() { printf 'build-wheelhouse: %s\n' "$*"; }

while (($#)); do
    opt=$1
    if [[ $opt == --*=* ]]; then
        set -- "${opt%%=*}" "${opt#*=}" "${@:2}"
        opt=$1
    fi
    case $opt in
        --out|--python-version|--platform|--torch-spec|--torch-index-url|--source|--python)
            (($# >= 2)) || die "$opt needs a value"
            case $opt in
                --out) out=$2 ;;
                --python-version) python_version=$2 ;;
                --platform) platform=$2 ;;
                --torch-spec) torch_spec=$2 ;;
                --torch-index-url) torch_index_url=$2 ;;
                --source) source_dir=$2 ;;
                --python) python_bin=$2 ;;
            esac
            shift 2
            ;;
        --with-torch) with_torch=1; shift ;;
        --clean) clean=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument: ${opt@Q}" ;;
    esac
done

[[ -n $out ]] || { usage >&2; die "--out is required"; }
[[ $python_version =~ ^3\.[0-9]{1,2}$ ]] || die "--python-version: X.Y, e.g. 3.12"
[[ $platform =~ ^[a-z0-9_]+$ ]] || die "--platform: a wheel platform tag: ${platform@Q}"
[[ $torch_spec =~ ^torch([=\<\>!~]=?[0-9A-Za-z.+*]+)?(,[=\<\>!~]=?[0-9A-Za-z.+*]+)*$ ]] ||
    die "--torch-spec: torch or torch<op><version>: ${torch_spec@Q}"
[[ -d $source_dir ]] || die "--source: not a directory: ${source_dir@Q}"
source_dir=$(cd -- "$source_dir" && pwd -P)

if [[ -z $python_bin ]]; then
    if command -v "python$python_version" >/dev/null; then
        python_bin="python$python_version"
    else
        python_bin=python3
    fi
fi
command -v -- "$python_bin" >/dev/null || die "--python: not found: ${python_bin@Q}"
builder_version=$("$python_bin" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [[ $builder_version != "$python_version" ]]; then
    # pip evaluates environment markers (python_version < "3.12" ...) against the
    # interpreter that runs it, not the target; wheel tags are right either way.
    log "note: pip runs on Python $builder_version for a $python_version target;" \
        "dependencies behind python_version markers may differ (use --python)"
fi

# pip matches --platform literally, so a manylinux_2_28 host must also be offered the
# older manylinux tags (2_17 = manylinux2014, 2_12 = manylinux2010, 2_5 = manylinux1)
# that most wheels on PyPI carry.
platforms=()
if [[ $platform =~ ^manylinux_2_([0-9]+)_([a-z0-9_]+)$ ]]; then
    glibc_minor=${BASH_REMATCH[1]} arch=${BASH_REMATCH[2]}
    for ((m = glibc_minor; m >= 5; m--)); do platforms+=("manylinux_2_${m}_${arch}"); done
    ((glibc_minor >= 17)) && platforms+=("manylinux2014_${arch}")
    if [[ $arch == x86_64 || $arch == i686 ]]; then
        ((glibc_minor >= 12)) && platforms+=("manylinux2010_${arch}")
        platforms+=("manylinux1_${arch}")
    fi
else
    platforms+=("$platform")
fi
target=(--only-binary=:all: --implementation cp --python-version "$python_version")
for p in "${platforms[@]}"; do target+=(--platform "$p"); done

mkdir -p -- "$out"
out=$(cd -- "$out" && pwd -P)
if ((clean)); then
    log "emptying $out"
    find "$out" -mindepth 1 -maxdepth 1 \( -name '*.whl' -o -name SHA256SUMS \) -delete
fi
pip=("$python_bin" -m pip --disable-pip-version-check)

log "building the kernelwatch wheel from $source_dir"
build_dir=$(mktemp -d)
trap 'rm -rf -- "$build_dir"' EXIT
# Build from a clean copy: setuptools reuses build/ in the source tree, where files of
# deleted modules would survive into the wheel. In a git checkout only the files git
# knows or would add are copied (no .venv, no build output).
mkdir -- "$build_dir/src" "$build_dir/wheels"
if git -C "$source_dir" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    (cd -- "$source_dir" && git ls-files -z --cached --others --exclude-standard) |
        (cd -- "$source_dir" && tar --null --files-from=- --create --file=-) |
        tar --extract --file=- --directory="$build_dir/src"
else
    cp -a -- "$source_dir/." "$build_dir/src/"
    rm -rf -- "$build_dir/src/build" "$build_dir/src/.venv"
fi
"${pip[@]}" wheel --no-deps --wheel-dir "$build_dir/wheels" -- "$build_dir/src"
shopt -s nullglob
built=("$build_dir"/wheels/*.whl)
shopt -u nullglob
((${#built[@]} == 1)) || die "expected one wheel from $source_dir, got ${#built[@]}"
wheel=${built[0]}

# The project's runtime requirements and its `gpu` extra (NVML: install-gpu-host.sh
# installs kernelwatch[gpu]), read from the wheel's METADATA; other extras are left out.
# torch is always dropped here (with --with-torch it is fetched below as --torch-spec,
# from its own index); triton is kept only with --with-torch.
mapfile -t requirements < <("$python_bin" - "$wheel" "$with_torch" <<'PY'
import re
import sys
import zipfile
from email.parser import Parser

wheel, with_torch = sys.argv[1], sys.argv[2] == "1"
with zipfile.ZipFile(wheel) as zf:
    name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
    meta = Parser().parsestr(zf.read(name).decode())
for req in meta.get_all("Requires-Dist") or []:
    if re.search(r"""\bextra\s*==""", req):
        if not re.search(r"""\bextra\s*==\s*["']gpu["']""", req):
            continue
        req = req.split(";", 1)[0].strip()  # the gpu extra's requirements carry no other marker
    project = re.match(r"[A-Za-z0-9._-]+", req).group(0).lower().replace("_", "-")
    if project == "torch" or (project == "triton" and not with_torch):
        continue
    print(req)
PY
)
log "dependencies: ${requirements[*]}"

log "downloading wheels for CPython $python_version on ${platforms[0]} (+ older tags)"
"${pip[@]}" download "${target[@]}" --dest "$out" -- "${requirements[@]}"
if ((with_torch)); then
    torch_index=()
    [[ -z $torch_index_url ]] || torch_index=(--index-url "$torch_index_url")
    log "downloading $torch_spec"
    "${pip[@]}" download "${target[@]}" "${torch_index[@]}" --dest "$out" -- "$torch_spec"
fi
cp -f -- "$wheel" "$out/"

(
    cd -- "$out"
    shopt -s nullglob
    wheels=(*.whl)
    ((${#wheels[@]})) || die "no wheels in $out"
    sha256sum -- "${wheels[@]}" >SHA256SUMS.tmp
    mv -f SHA256SUMS.tmp SHA256SUMS
    log "${#wheels[@]} wheels, manifest $out/SHA256SUMS"
)
log "total size: $(du -sh -- "$out" | cut -f1) in $out"
