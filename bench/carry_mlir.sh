#!/usr/bin/env bash
# Packs the run-time libraries of the MLIR-linked binaries (make MLIR=1) into .carry/mlir.tar.xz
# (git-ignored), for a GPU machine that has no MLIR: bench/mlir_gpu.sh unpacks it into /tmp/bt_mlir_libs/lib
# and runs those binaries with LD_LIBRARY_PATH pointing there. Usage: bash bench/carry_mlir.sh
#
# What a binary linked with MLIR's C API needs beyond a bare Ubuntu/Debian with CUDA (ldd of
# build/tests/test_mlir on Debian 12; the tar is xz -9, about 33 MB):
#   libMLIR.so.19.1 (libmlir-19), libLLVM.so.19.1 (libllvm19)     Debian's packages, as they are
#   libffi.so.8 libedit.so.2 libbsd.so.0 libmd.so.0 libtinfo.so.6  libLLVM's and libedit's needs
#     (small; carried so that an image without them still loads)
#   libxml2.so.2 (Debian's)                                         libLLVM imports a data symbol
#     (xmlFree) from it, which the loader binds at load time, so it must be real
#   libz3.so.4, libicuuc.so.72                                      EMPTY stubs with those sonames:
#     libLLVM calls Z3 only for the clang static analyzer's SMT solver and libxml2 calls ICU only
#     to convert text encodings; neither runs in bt_mlir's pass pipelines, JIT or PTX path, and
#     functions bind lazily (libLLVM is not linked -z now), so the stubs satisfy the loader and
#     save the 17 MB of Z3 and the 31 MB of ICU data. A call into one would stop the process
#     with "symbol lookup error".
#   libz, libzstd, liblzma, libstdc++ (GLIBCXX_3.4.30), libgcc_s, libgomp, libc: the system's.
# Debian 12's libLLVM.so.19.1 needs glibc >= 2.36 (arc4random@GLIBC_2.36) and GLIBCXX_3.4.30:
# Ubuntu 24.04 has both; Ubuntu 22.04 (glibc 2.35) cannot load it (bench/mlir_gpu.sh checks first
# and prints ldd's answer; the ahead-of-time path needs none of this).
set -euo pipefail
cd "$(dirname "$0")/.."
work=build/mlir_carry
rm -rf "$work"; mkdir -p "$work/debs" "$work/root" "$work/lib"
(cd "$work/debs" && apt-get download libmlir-19 libllvm19 libxml2 libedit2 libbsd0 libmd0 libffi8 libtinfo6 2>&1 | grep -v "^W: Download is performed unsandboxed" | grep -v "^Get:" || true)
for d in "$work"/debs/*.deb; do dpkg -x "$d" "$work/root"; done
for so in libMLIR.so.19.1 libLLVM.so.19.1 libxml2.so.2 libedit.so.2 libbsd.so.0 libmd.so.0 libffi.so.8 libtinfo.so.6; do
  f=$(find "$work/root" -name "$so" | head -1)
  [ -n "$f" ] || { echo "carry_mlir: $so is not in the downloaded packages" >&2; exit 1; }
  cp -L "$f" "$work/lib/$so"
done
# empty stubs (see above) that define every symbol the importer takes from them, as a no-op
# function: Debian's libxml2 is linked -z now (all its imports bind at load time) and takes the
# address of ICU's UCNV_*_CALLBACK_STOP_72; libLLVM's Z3 imports would bind lazily, defined anyway.
stub() {   # stub SONAME SYMBOLS...
  local so=$1; shift
  { echo "/* stub for $so: bench/carry_mlir.sh */"; for s in "$@"; do echo "void $s(void) {}"; done; echo "int bt_carry_stub(void) { return 0; }"; } |
    cc -shared -fPIC -x c - -Wl,-soname,"$so" -o "$work/lib/$so"
}
imports() {  # imports LIB REGEX: the undefined dynamic symbols of LIB whose names match REGEX
  nm -D --undefined-only "$1" | awk -v re="$2" '{sub(/@.*/, "", $2); if ($2 ~ re) print $2}' | sort -u
}
stub libz3.so.4 $(imports "$work/lib/libLLVM.so.19.1" '^Z3_')
stub libicuuc.so.72 $(imports "$work/lib/libxml2.so.2" '_72$')
strip --strip-unneeded "$work"/lib/*.so* 2>/dev/null || true
mkdir -p .carry
XZ_OPT="-9 -T2" tar -cJf .carry/mlir.tar.xz -C "$work" lib
rm -rf "$work/root" "$work/debs"
ls -la .carry/mlir.tar.xz
du -sh .carry
total=$(du -sm .carry | cut -f1)
[ "$total" -le 60 ] || echo "carry_mlir: .carry is ${total} MiB: a device call carries 64 MiB at most" >&2
