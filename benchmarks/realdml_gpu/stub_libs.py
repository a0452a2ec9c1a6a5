"""Stand-ins for the CUDA libraries torch 2.4.1's Linux wheel links, so that its CPU half
imports on a machine where only ~64 MiB may travel (the device tool): ``libtorch_cuda.so``
(900 MB) becomes the symbols ``libtorch_python.so`` binds from it (functions return a
pointer to zeroed memory, type_info objects carry their names for pybind11, data is
zeroed), and ``libcupti.so.12`` the 32 versioned functions kineto binds (each returns an
error). torch.cuda must stay unused (``CUDA_VISIBLE_DEVICES=``).

Usage: python stub_libs.py TORCH_LIB_DIR REAL_LIBTORCH_CUDA_SO
"""
import subprocess
import sys
from pathlib import Path


def _nm(*args):
    return subprocess.run(["nm", "-D", *args], capture_output=True, text=True, check=True).stdout


def torch_cuda(lib: Path, real: Path) -> None:
    wanted = {line.split()[-1] for line in _nm("--undefined-only", str(lib / "libtorch_python.so")).splitlines()}
    out = ['.section .note.GNU-stack,"",@progbits\n']
    for line in _nm("--defined-only", "-S", str(real)).splitlines():
        fields = line.split()
        if len(fields) != 4 or fields[3] not in wanted:
            continue
        size, kind, sym = int(fields[1], 16), fields[2], fields[3]
        if kind in "TtWwi":
            out.append(f".text\n.globl {sym}\n.type {sym},@function\n{sym}:\n lea stub_scratch(%rip),%rax\n ret\n")
        elif sym.startswith("_ZTI"):
            pad = f" .zero {size - 16}\n" if size > 16 else ""
            out.append(f'.section .rodata\nstr_{sym}: .asciz "{sym[4:]}"\n.data\n.balign 16\n.globl {sym}\n'
                       f".type {sym},@object\n.size {sym},{max(size, 16)}\n{sym}:\n"
                       f" .quad _ZTVN10__cxxabiv117__class_type_infoE+16\n .quad str_{sym}\n{pad}")
        else:
            out.append(f".data\n.balign 16\n.globl {sym}\n.type {sym},@object\n.size {sym},{max(size, 8)}\n"
                       f"{sym}:\n .zero {max(size, 8)}\n")
    out.append(".bss\n.balign 64\nstub_scratch:\n .zero 65536\n")
    _build(lib / "libtorch_cuda.so", "".join(out), ["-lstdc++"])


def cupti(lib: Path) -> None:
    syms = sorted({s.split("@")[0] for s in _nm("--undefined-only", str(lib / "libtorch_cpu.so")).split()
                   if s.endswith("@libcupti.so.12")})
    asm = '.section .note.GNU-stack,"",@progbits\n.text\n' + "".join(
        f".globl {s}\n.type {s},@function\n{s}:\n mov $999,%eax\n ret\n" for s in syms)
    version = lib / "cupti.map"
    version.write_text("libcupti.so.12 { global: " + " ".join(s + ";" for s in syms) + " local: *; };\n")
    _build(lib / "libcupti.so.12", asm, [f"-Wl,--version-script={version}", "-Wl,-soname,libcupti.so.12"])
    version.unlink()


def _build(target: Path, asm: str, flags) -> None:
    source = target.with_suffix(".s")
    source.write_text(asm)
    subprocess.run(["gcc", "-shared", "-o", str(target), str(source), *flags], check=True)
    source.unlink()


if __name__ == "__main__":
    torch_cuda(Path(sys.argv[1]), Path(sys.argv[2]))
    cupti(Path(sys.argv[1]))
