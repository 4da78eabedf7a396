# bench/gpu_env.sh: sourced by the GPU scripts (bench/run_gpu_*.sh) after they
# cd to the repository root, with $build set to the CUDA build folder.
# Exports LD_LIBRARY_PATH so that kvcal's binaries find on a GPU host:
# the shared libraries the host lacks, from $KVCAL_LIBS (only those the host
# lacks, so that Python keeps the host's own); the CUDA toolkit's; PyTorch's
# CUDA libraries when the toolkit's are not installed; and cuDNN (opened at
# run time by the runner's attention; without it the runner takes kvcal's
# kernel) with NVRTC (its run-time compiled engines) from the Python nvidia
# packages when the dynamic linker does not find libcudnn.so.9. Says which
# libraries are still missing.
if [ -n "${KVCAL_LIBS:-}" ]; then
    missing=$(mktemp -d)
    for f in "$KVCAL_LIBS"/*; do
        ldconfig -p | grep -q "^[[:space:]]*$(basename "$f") " || ln -s "$(readlink -f "$f")" "$missing/"
    done
    export LD_LIBRARY_PATH="$missing${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"
done
py_dirs() { # folders of the Python nvidia packages holding files named $1
    python3 -c 'import glob, os, sys, nvidia; print(":".join(sorted({os.path.dirname(p) for d in nvidia.__path__ for p in glob.glob(d + "/**/" + sys.argv[1], recursive=True)})))' "$1" 2>/dev/null
}
# the binary whose libraries are looked for: the tests, or kvcal alone
linked_bin="$build/kvcal_tests"
[ -e "$linked_bin" ] || linked_bin="$build/kvcal"
if ldd "$linked_bin" | grep -q 'not found'; then
    export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$(py_dirs 'lib*.so*')"
fi
if ! ldconfig -p | grep -q 'libcudnn.so.9 '; then
    export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$(py_dirs 'libcudnn.so.9'):$(py_dirs 'libnvrtc.so*')"
fi
ldd "$linked_bin" | grep 'not found' && echo "missing libraries (see above)"
