# gpu_env: source it on a GPU machine to find cuBLAS and, where a pack was unpacked, the build's
# libraries that the machine lacks (.device/lib: scripts/gpu_check.sh prepare and pack);
# scripts/gpu_check.sh run sources it too.
_cublas=$(dirname "$(find /usr/local/cuda/ /usr/local/cuda-*/ /usr/lib /opt -name 'libcublas.so.13' 2>/dev/null | head -1)" 2>/dev/null)
export LD_LIBRARY_PATH="$PWD/.device/lib:${_cublas:-/usr/local/cuda/lib64}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
unset _cublas
