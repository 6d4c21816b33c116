# gpu_env: source it on the GPU machine to find the libraries the device tool's machine lacks
# (.device/lib, from scripts/gpu_check.sh prepare) and its cuBLAS; scripts/gpu_check.sh run sources it too.
_cublas=$(dirname "$(find /usr/local/cuda/ /usr/local/cuda-*/ /usr/lib /opt -name 'libcublas.so.13' 2>/dev/null | head -1)" 2>/dev/null)
export LD_LIBRARY_PATH="$PWD/.device/lib:${_cublas:-/usr/local/cuda/lib64}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
unset _cublas
