#!/bin/bash
# Pack torch 2.4.1 (cp312, its CPU half) + torch-directml 0.2.5 + the built realdml stack
# (vkd3d-proton, forwarder, DXCore stand-in; no lavapipe) for a GPU machine reached through
# the device tool: three ~40 MB parts in .gpu1/.gpu2/.gpu3 (64 MiB travel per call), and the
# Vulkan loader's debs. Run from the repository root after `make realdml`. See README.md.
set -euo pipefail
W=${W:-/tmp/realdml-gpu}; rm -rf $W; mkdir -p $W/dl $W/b/site
PIP_CONSTRAINT= pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux1_x86_64 --platform manylinux2010_x86_64 -d $W/dl torch==2.4.1 torch-directml==0.2.5.dev240914
cd $W/b/site
unzip -q $W/dl/torch-2.4.1-*.whl -x 'torch/include/*' 'torch/share/*' 'torch/lib/libtorch_cuda_linalg.so' 'torch/lib/libcusparseLt*'
unzip -q $W/dl/torch_directml-*.whl
mv torch/lib/libtorch_cuda.so $W/real_libtorch_cuda.so
N=$OLDPWD/.venv-torch2.4.1/lib/python3.11/site-packages/nvidia
cp $N/cuda_runtime/lib/libcudart.so.12 $N/nvtx/lib/libnvToolsExt.so.1 $N/cudnn/lib/libcudnn.so.9 torch/lib/
python3 $OLDPWD/benchmarks/realdml_gpu/stub_libs.py torch/lib $W/real_libtorch_cuda.so
strip --strip-unneeded torch/lib/libtorch_cpu.so torch/lib/libtorch_python.so torch/lib/libc10.so
cd $OLDPWD
stack=$(.venv-realdml/bin/python -c "from dmlshim.realdml import stack; print(stack.current().path)")
cp -a $stack $W/b/stack && rm -f $W/b/stack/lib/libvulkan_lvp.so $W/b/stack/lib/libdrm*
cp -L /usr/lib/x86_64-linux-gnu/libvulkan.so.1 $W/b/stack/lib/
tar cf - -C $W/b site stack | zstd -q -17 -T0 --long=27 -o $W/bundle.tar.zst
for d in .gpu1 .gpu2 .gpu3; do rm -rf $d; mkdir $d; grep -qx "/$d/" .git/info/exclude || echo "/$d/" >> .git/info/exclude; done
(cd $W && split -n 3 -d bundle.tar.zst part && sha256sum bundle.tar.zst > SUM)
mv $W/part00 .gpu1/b312.part00; mv $W/part01 .gpu2/b312.part01; mv $W/part02 .gpu3/b312.part02
cp /usr/bin/zstd $(ldd /usr/bin/zstd | awk '/lz4|lzma/{print $3}') .gpu2/
cp $W/SUM benchmarks/realdml_gpu/run.sh benchmarks/realdml_gpu/repro.py benchmarks/realdml_gpu/quick.py .gpu3/
PIP_CONSTRAINT= pip download -q --no-deps -d .gpu3 expecttest platformdirs
o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
mkdir -p /tmp/amd64/partial && apt-get $o update >/dev/null && (cd .gpu3 && apt-get $o download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
ls -la .gpu1 .gpu2 .gpu3
