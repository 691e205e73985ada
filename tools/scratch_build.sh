# Sourced by tools/sanitize.sh and tools/isa_check.sh: copy this tree into a scratch folder and
# build the extensions there, in place, with the given build settings.
#
#   scratch_build HERE SCRATCH LABEL PYTHON [VAR=VALUE ...]
#
# The copy holds the tracked and the untracked-but-not-ignored files (the working tree as it is,
# without build output); a failed build prints the end of its log and exits the calling script.
scratch_build() {
    local here="$1" scratch="$2" label="$3" python="$4"
    shift 4
    rm -rf "$scratch"
    mkdir -p "$scratch"
    if git -C "$here" rev-parse --git-dir > /dev/null 2>&1; then
        (cd "$here" && git ls-files -co --exclude-standard -z | xargs -0 tar cf -) | tar xf - -C "$scratch"
    else
        (cd "$here" && tar cf - --exclude=./build --exclude='*.so' --exclude='*.egg-info' .) | tar xf - -C "$scratch"
    fi
    echo "$label: building ($*) in $scratch"
    (cd "$scratch" && env "$@" "$python" setup.py build_ext --inplace -q -j 2 > build.log 2>&1) \
        || { tail -40 "$scratch/build.log"; exit 1; }
}
