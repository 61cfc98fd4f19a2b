// bench.cpp - mico's verilator test bench for a VexRiscv core (one of the pythondata-cpu-vexriscv
// verilog files, top module VexRiscv, verilated with --prefix VVexRiscv).
//
// usage: vexriscv_sim [--max-cycles N] [--marks FILE] PROGRAM.elf
//
// Memory map (see mico_vexriscv.ld and mico_vexriscv_sys.c, which must agree):
//   0x40000000 .. 0x40800000  RAM, 8 MiB (cached by the core): the ELF's PT_LOAD segments are
//                             loaded at their physical addresses; the core starts at e_entry
//   0xF0000000 ..             I/O (the core never caches addresses with bit 31 set):
//     +0x00 EXIT    w  stop, exit status = the value written
//     +0x04 STDOUT  w  one byte to the host's stdout
//     +0x08 STDERR  w  one byte to the host's stderr
//     +0x0C VALUE   w  prints "value N" (decimal) on stdout
//     +0x10 TRAP_CAUSE, +0x14 TRAP_EPC, +0x18 TRAP_TVAL  w  a trap's mcause, mepc, mtval
//     +0x1C TRAP    w  report the trap and stop (exit status 65)
//     +0x20 ARG0, +0x24 ARG1, +0x28 ARG2  w  file call arguments
//     +0x2C CALL    w  run file call N (below) on the host; +0x30 RESULT r  its result
//     +0x1000 .. +0x2000  BUF: 4 KiB the file calls exchange data (and the path of OPEN) through
//   File calls, on files in the working directory only (a name without '/'):
//     1 OPEN  ARG0 = flags (1 read, 2 write, 4 create, 8 truncate, 16 append), path in BUF
//     2 CLOSE ARG0 = fd     3 READ ARG0 = fd, ARG1 = bytes (<= 4096) into BUF
//     4 WRITE ARG0 = fd, ARG1 = bytes from BUF (fd 1, 2: the host's stdout, stderr)
//     5 LSEEK ARG0 = fd, ARG1 = offset, ARG2 = whence (0 set, 1 cur, 2 end)
//   RESULT is the call's result, or -errno.
// Every bus access is answered in the cycle it is issued (single-cycle SRAM, zero wait
// states). This VexRiscv ignores the buses' ERR lines, so an access outside RAM and I/O stops
// the simulation with a bus error naming the address.
//
// Marks: whenever an instruction that reads the instret CSR (csrrs rd, instret or minstret, x0)
// retires, the bench appends "<cycle> <value read>" to the marks file: mico's main.c reads
// instret just before and just after every inference, so consecutive marks bracket one
// inference and their cycle difference is the mcycle difference around it.
//
// Exit status: the program's own (0..63 by convention), or 64 usage / unreadable or invalid
// ELF, 65 trap, 66 cycle limit reached, 67 bus error.
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <map>
#include <memory>
#include <string>
#include <unistd.h>
#include <vector>

#include "VVexRiscv.h"
#include "VVexRiscv_VexRiscv.h"
#include "verilated.h"

namespace {

constexpr uint32_t kRamBase = 0x40000000u;
constexpr uint32_t kRamSize = 8u << 20;
constexpr uint32_t kIoBase = 0xF0000000u;
constexpr uint32_t kBufOffset = 0x1000u;
constexpr uint32_t kBufSize = 0x1000u;
constexpr int kExitUsage = 64;
constexpr int kExitTrap = 65;
constexpr int kExitCycles = 66;
constexpr int kExitBus = 67;
constexpr uint64_t kResetCycles = 16;

[[noreturn]] void fail(int status, const std::string &message)
{
    std::fprintf(stderr, "vexriscv bench: %s\n", message.c_str());
    std::exit(status);
}

std::string hex(uint32_t value)
{
    char text[16];
    std::snprintf(text, sizeof text, "0x%08x", value);
    return text;
}

const char *cause_name(uint32_t cause)
{
    switch (cause) {
    case 0: return "instruction address misaligned";
    case 1: return "instruction access fault";
    case 2: return "illegal instruction";
    case 3: return "breakpoint";
    case 4: return "load address misaligned";
    case 5: return "load access fault";
    case 6: return "store address misaligned";
    case 7: return "store access fault";
    case 11: return "environment call from M-mode";
    default: return "unknown cause";
    }
}

class Bench {
  public:
    std::vector<uint8_t> ram = std::vector<uint8_t>(kRamSize, 0);
    uint8_t buf[kBufSize] = {};
    uint32_t args[3] = {0, 0, 0};
    int32_t result = 0;
    uint32_t trap[3] = {0, 0, 0};
    bool done = false;
    int status = 0;
    std::map<int32_t, int> files;  // guest fd -> host fd
    int32_t next_fd = 3;

    // Load the ELF's PT_LOAD segments into RAM; return its entry point.
    uint32_t load(const char *path)
    {
        FILE *file = std::fopen(path, "rb");
        if (!file) {
            fail(kExitUsage, std::string("cannot open ") + path + ": " + std::strerror(errno));
        }
        std::vector<uint8_t> image;
        uint8_t chunk[65536];
        size_t got;
        while ((got = std::fread(chunk, 1, sizeof chunk, file)) > 0) {
            image.insert(image.end(), chunk, chunk + got);
        }
        std::fclose(file);
        const std::string what = std::string(path) + " ";
        if (image.size() < 52 || std::memcmp(image.data(), "\x7f" "ELF", 4) != 0) {
            fail(kExitUsage, what + "is not an ELF file");
        }
        if (image[4] != 1 || image[5] != 1 || read16(image, 18) != 243) {
            fail(kExitUsage, what + "is not a 32-bit little-endian RISC-V ELF");
        }
        const uint32_t entry = read32(image, 24);
        const uint32_t phoff = read32(image, 28);
        const uint32_t phentsize = read16(image, 42), phnum = read16(image, 44);
        for (uint32_t i = 0; i < phnum; i++) {
            const size_t ph = phoff + (size_t)i * phentsize;
            if (ph + 32 > image.size()) {
                fail(kExitUsage, what + "has a truncated program header table");
            }
            if (read32(image, ph) != 1) {  // PT_LOAD
                continue;
            }
            const uint32_t offset = read32(image, ph + 4), paddr = read32(image, ph + 12);
            const uint32_t filesz = read32(image, ph + 16), memsz = read32(image, ph + 20);
            if ((size_t)offset + filesz > image.size() || filesz > memsz) {
                fail(kExitUsage, what + "has a segment past the end of the file");
            }
            if (memsz && (paddr < kRamBase || paddr - kRamBase > kRamSize - memsz ||
                          memsz > kRamSize)) {
                fail(kExitUsage, what + "has a segment at " + hex(paddr) + " (+" +
                                     std::to_string(memsz) + " bytes) outside the RAM at " +
                                     hex(kRamBase) + " (+" + std::to_string(kRamSize) +
                                     " bytes): link it with mico_vexriscv.ld");
            }
            std::memcpy(&ram[paddr - kRamBase], &image[offset], filesz);
        }
        if (entry < kRamBase || entry - kRamBase >= kRamSize) {
            fail(kExitUsage, what + "has its entry point " + hex(entry) + " outside the RAM");
        }
        return entry;
    }

    // One Wishbone access of `sel` bytes at word address `adr`; false: bus error.
    bool access(uint32_t adr, bool we, uint32_t sel, uint32_t mosi, uint32_t *miso)
    {
        const uint32_t addr = adr << 2;
        *miso = 0;
        if (addr >= kRamBase && addr - kRamBase < kRamSize) {
            uint8_t *word = &ram[addr - kRamBase];
            for (int b = 0; b < 4; b++) {
                if (we && (sel >> b & 1u)) {
                    word[b] = (uint8_t)(mosi >> (8 * b));
                }
                *miso |= (uint32_t)word[b] << (8 * b);
            }
            return true;
        }
        if (addr >= kIoBase + kBufOffset && addr < kIoBase + kBufOffset + kBufSize) {
            uint8_t *word = &buf[addr - kIoBase - kBufOffset];
            for (int b = 0; b < 4; b++) {
                if (we && (sel >> b & 1u)) {
                    word[b] = (uint8_t)(mosi >> (8 * b));
                }
                *miso |= (uint32_t)word[b] << (8 * b);
            }
            return true;
        }
        if (addr >= kIoBase && addr < kIoBase + 0x34) {
            if (we) {
                io_write(addr - kIoBase, mosi);
            } else if (addr - kIoBase == 0x30) {
                *miso = (uint32_t)result;
            }
            return true;
        }
        return false;
    }

  private:
    static uint32_t read16(const std::vector<uint8_t> &b, size_t at)
    {
        return (uint32_t)b[at] | (uint32_t)b[at + 1] << 8;
    }
    static uint32_t read32(const std::vector<uint8_t> &b, size_t at)
    {
        return read16(b, at) | read16(b, at + 2) << 16;
    }

    void io_write(uint32_t reg, uint32_t value)
    {
        switch (reg) {
        case 0x00:
            done = true;
            status = (int)(value & 0xffu);
            break;
        case 0x04: std::fputc((int)(value & 0xffu), stdout); break;
        case 0x08: std::fputc((int)(value & 0xffu), stderr); break;
        case 0x0C: std::fprintf(stdout, "value %u\n", value); break;
        case 0x10: case 0x14: case 0x18: trap[(reg - 0x10) / 4] = value; break;
        case 0x1C:
            std::fflush(stdout);
            fail(kExitTrap, std::string("the program trapped: mcause ") +
                                std::to_string(trap[0]) + " (" + cause_name(trap[0]) +
                                ") at pc " + hex(trap[1]) + ", mtval " + hex(trap[2]));
        case 0x20: case 0x24: case 0x28: args[(reg - 0x20) / 4] = value; break;
        case 0x2C: result = call(value); break;
        default: break;
        }
    }

    int32_t host_fd(int32_t fd)
    {
        auto it = files.find(fd);
        return it == files.end() ? -1 : it->second;
    }

    int32_t call(uint32_t op)
    {
        switch (op) {
        case 1: {  // OPEN
            buf[kBufSize - 1] = 0;
            const char *name = (const char *)buf;
            if (!*name || std::strchr(name, '/') || !std::strcmp(name, ".") ||
                !std::strcmp(name, "..")) {
                return -EACCES;
            }
            const uint32_t f = args[0];
            int flags = (f & 1u) && (f & 2u) ? O_RDWR : (f & 2u) ? O_WRONLY : O_RDONLY;
            flags |= (f & 4u ? O_CREAT : 0) | (f & 8u ? O_TRUNC : 0) | (f & 16u ? O_APPEND : 0);
            const int fd = ::open(name, flags, 0644);
            if (fd < 0) {
                return -errno;
            }
            files[next_fd] = fd;
            return next_fd++;
        }
        case 2: {  // CLOSE
            const int fd = host_fd((int32_t)args[0]);
            if (fd < 0) {
                return -EBADF;
            }
            files.erase((int32_t)args[0]);
            return ::close(fd) == 0 ? 0 : -errno;
        }
        case 3: {  // READ
            const int fd = host_fd((int32_t)args[0]);
            if (fd < 0) {
                return -EBADF;
            }
            const ssize_t got = ::read(fd, buf, args[1] < kBufSize ? args[1] : kBufSize);
            return got < 0 ? -errno : (int32_t)got;
        }
        case 4: {  // WRITE
            const size_t n = args[1] < kBufSize ? args[1] : kBufSize;
            if (args[0] == 1 || args[0] == 2) {
                FILE *stream = args[0] == 1 ? stdout : stderr;
                return (int32_t)std::fwrite(buf, 1, n, stream);
            }
            const int fd = host_fd((int32_t)args[0]);
            if (fd < 0) {
                return -EBADF;
            }
            const ssize_t put = ::write(fd, buf, n);
            return put < 0 ? -errno : (int32_t)put;
        }
        case 5: {  // LSEEK
            const int fd = host_fd((int32_t)args[0]);
            if (fd < 0) {
                return -EBADF;
            }
            const off_t at = ::lseek(fd, (off_t)(int32_t)args[1], (int)args[2]);
            return at < 0 ? -errno : (int32_t)at;
        }
        default: return -ENOSYS;
        }
    }
};

// Answer the bus's pending access (if any) in this cycle; stop on an unmapped address.
void serve(Bench &bench, const char *bus, uint8_t cyc, uint8_t stb, uint8_t we, uint32_t adr,
           uint8_t sel, uint32_t mosi, uint8_t &ack, uint32_t &miso)
{
    ack = 0;
    if (cyc && stb) {
        uint32_t data = 0;
        if (!bench.access(adr, we, sel, mosi, &data)) {
            std::fflush(stdout);
            fail(kExitBus, std::string("bus error: the program ") +
                               (we ? "wrote to " : "read from ") + hex(adr << 2) + " on the " +
                               bus + " bus, outside the RAM at " + hex(kRamBase) + " (+" +
                               std::to_string(kRamSize) + " bytes) and the I/O registers at " +
                               hex(kIoBase));
        }
        ack = 1;
        miso = data;
    }
}

// csrrs rd, instret (0xC02) or minstret (0xB02), x0: what a counter read compiles to.
bool reads_instret(uint32_t insn)
{
    const uint32_t csr = insn >> 20;
    return (insn & 0x7fu) == 0x73u && ((insn >> 12) & 7u) == 2u && ((insn >> 15) & 31u) == 0u &&
           (csr == 0xC02u || csr == 0xB02u);
}

}  // namespace

int main(int argc, char **argv)
{
    uint64_t max_cycles = 0;  // 0: no limit
    const char *marks_path = nullptr;
    const char *elf = nullptr;
    for (int i = 1; i < argc; i++) {
        const std::string arg = argv[i];
        if (arg == "--max-cycles" && i + 1 < argc) {
            max_cycles = std::strtoull(argv[++i], nullptr, 10);
        } else if (arg == "--marks" && i + 1 < argc) {
            marks_path = argv[++i];
        } else if (!elf && arg.rfind("--", 0) != 0) {
            elf = argv[i];
        } else {
            elf = nullptr;
            break;
        }
    }
    if (!elf) {
        fail(kExitUsage, "usage: vexriscv_sim [--max-cycles N] [--marks FILE] PROGRAM.elf");
    }
    Bench bench;
    const uint32_t entry = bench.load(elf);
    FILE *marks = nullptr;
    if (marks_path && !(marks = std::fopen(marks_path, "w"))) {
        fail(kExitUsage, std::string("cannot write ") + marks_path + ": " + std::strerror(errno));
    }

    auto context = std::make_unique<VerilatedContext>();
    context->randReset(0);
    auto core = std::make_unique<VVexRiscv>(context.get());
    VVexRiscv_VexRiscv *cpu = core->VexRiscv;  // its verilator-public signals
    core->externalResetVector = entry;
    core->timerInterrupt = 0;
    core->softwareInterrupt = 0;
    core->externalInterruptArray = 0;
    core->iBusWishbone_ACK = core->iBusWishbone_ERR = 0;
    core->dBusWishbone_ACK = core->dBusWishbone_ERR = 0;
    core->reset = 1;
    for (uint64_t i = 0; i < kResetCycles; i++) {
        core->clk = 0;
        core->eval();
        core->clk = 1;
        core->eval();
    }
    core->reset = 0;

    uint64_t cycle = 0;
    while (!bench.done) {
        if (max_cycles && cycle >= max_cycles) {
            std::fflush(stdout);
            fail(kExitCycles, "stopped after the cycle limit of " + std::to_string(max_cycles) +
                                  " cycles");
        }
        core->clk = 0;
        core->eval();
        uint8_t ack;
        uint32_t miso = core->iBusWishbone_DAT_MISO;
        serve(bench, "instruction", core->iBusWishbone_CYC, core->iBusWishbone_STB,
              core->iBusWishbone_WE, core->iBusWishbone_ADR, core->iBusWishbone_SEL,
              core->iBusWishbone_DAT_MOSI, ack, miso);
        core->iBusWishbone_ACK = ack;
        core->iBusWishbone_DAT_MISO = miso;
        miso = core->dBusWishbone_DAT_MISO;
        serve(bench, "data", core->dBusWishbone_CYC, core->dBusWishbone_STB,
              core->dBusWishbone_WE, core->dBusWishbone_ADR, core->dBusWishbone_SEL,
              core->dBusWishbone_DAT_MOSI, ack, miso);
        core->dBusWishbone_ACK = ack;
        core->dBusWishbone_DAT_MISO = miso;
        core->eval();
        if (marks && cpu->lastStageIsFiring && reads_instret(cpu->lastStageInstruction)) {
            std::fprintf(marks, "%llu %u\n", (unsigned long long)cycle,
                         (unsigned)cpu->lastStageRegFileWrite_payload_data);
        }
        core->clk = 1;
        core->eval();
        cycle++;
    }
    core->final();
    if (marks) {
        std::fclose(marks);
    }
    std::fflush(stdout);
    std::fprintf(stderr, "vexriscv bench: %llu cycles\n", (unsigned long long)cycle);
    return bench.status;
}
