/*
 * mico_vexriscv_sys.c - picolibc's system calls on mico's VexRiscv test bench (bench.cpp): the
 * standard streams and open / close / read / write / lseek go to the bench's I/O registers at
 * 0xF0000000 (uncached: the core never caches addresses with bit 31 set), which run them on
 * files in the simulator's working directory; _exit stops the simulation. Linked into every
 * program built with TARGET=vexriscv, in place of picolibc's semihosting.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#define MICO_IO(off) (*(volatile uint32_t *)(0xF0000000u + (off)))
#define MICO_IO_EXIT 0x00u
#define MICO_IO_STDOUT 0x04u
#define MICO_IO_STDERR 0x08u
#define MICO_IO_ARG0 0x20u
#define MICO_IO_ARG1 0x24u
#define MICO_IO_ARG2 0x28u
#define MICO_IO_CALL 0x2Cu
#define MICO_IO_RESULT 0x30u
#define MICO_IO_BUF ((volatile uint8_t *)0xF0001000u)
#define MICO_IO_BUF_SIZE 4096u

enum { MICO_OPEN = 1, MICO_CLOSE = 2, MICO_READ = 3, MICO_WRITE = 4, MICO_LSEEK = 5 };

static int mico_put_stdout(char c, FILE *file)
{
    (void)file;
    MICO_IO(MICO_IO_STDOUT) = (uint8_t)c;
    return (uint8_t)c;
}

static int mico_put_stderr(char c, FILE *file)
{
    (void)file;
    MICO_IO(MICO_IO_STDERR) = (uint8_t)c;
    return (uint8_t)c;
}

static FILE mico_stdout = FDEV_SETUP_STREAM(mico_put_stdout, NULL, NULL, _FDEV_SETUP_WRITE);
static FILE mico_stderr = FDEV_SETUP_STREAM(mico_put_stderr, NULL, NULL, _FDEV_SETUP_WRITE);
FILE *const stdin = NULL; /* the bench has no console input */
FILE *const stdout = &mico_stdout;
FILE *const stderr = &mico_stderr;

/* Run file call `op` on the bench; a negative result is -errno. */
static int32_t mico_call(uint32_t op, uint32_t a0, uint32_t a1, uint32_t a2)
{
    int32_t result;
    MICO_IO(MICO_IO_ARG0) = a0;
    MICO_IO(MICO_IO_ARG1) = a1;
    MICO_IO(MICO_IO_ARG2) = a2;
    MICO_IO(MICO_IO_CALL) = op;
    result = (int32_t)MICO_IO(MICO_IO_RESULT);
    if (result < 0) {
        errno = (int)-result;
        return -1;
    }
    return result;
}

int open(const char *path, int flags, ...)
{
    uint32_t i, mode = 0;
    for (i = 0; path[i] && i < MICO_IO_BUF_SIZE - 1u; i++) {
        MICO_IO_BUF[i] = (uint8_t)path[i];
    }
    if (path[i]) {
        errno = ENAMETOOLONG;
        return -1;
    }
    MICO_IO_BUF[i] = 0;
    switch (flags & O_ACCMODE) {
    case O_RDONLY: mode = 1u; break;
    case O_WRONLY: mode = 2u; break;
    default: mode = 3u; break;
    }
    mode |= (flags & O_CREAT ? 4u : 0u) | (flags & O_TRUNC ? 8u : 0u) |
            (flags & O_APPEND ? 16u : 0u);
    return (int)mico_call(MICO_OPEN, mode, 0u, 0u);
}

int close(int fd)
{
    return (int)mico_call(MICO_CLOSE, (uint32_t)fd, 0u, 0u);
}

ssize_t read(int fd, void *buf, size_t count)
{
    uint8_t *dst = (uint8_t *)buf;
    size_t done = 0;
    while (done < count) {
        const uint32_t want =
            count - done < MICO_IO_BUF_SIZE ? (uint32_t)(count - done) : MICO_IO_BUF_SIZE;
        const int32_t got = mico_call(MICO_READ, (uint32_t)fd, want, 0u);
        int32_t i;
        if (got < 0) {
            return done ? (ssize_t)done : -1;
        }
        for (i = 0; i < got; i++) {
            dst[done + (size_t)i] = MICO_IO_BUF[i];
        }
        done += (size_t)got;
        if ((uint32_t)got < want) {
            break;
        }
    }
    return (ssize_t)done;
}

ssize_t write(int fd, const void *buf, size_t count)
{
    const uint8_t *src = (const uint8_t *)buf;
    size_t done = 0;
    while (done < count) {
        const uint32_t n =
            count - done < MICO_IO_BUF_SIZE ? (uint32_t)(count - done) : MICO_IO_BUF_SIZE;
        int32_t put;
        uint32_t i;
        for (i = 0; i < n; i++) {
            MICO_IO_BUF[i] = src[done + i];
        }
        put = mico_call(MICO_WRITE, (uint32_t)fd, n, 0u);
        if (put < 0) {
            return done ? (ssize_t)done : -1;
        }
        done += (size_t)put;
        if ((uint32_t)put < n) {
            break;
        }
    }
    return (ssize_t)done;
}

off_t lseek(int fd, off_t offset, int whence)
{
    return (off_t)mico_call(MICO_LSEEK, (uint32_t)fd, (uint32_t)offset, (uint32_t)whence);
}

void _exit(int status)
{
    for (;;) {
        MICO_IO(MICO_IO_EXIT) = (uint32_t)status;
    }
}

/* Emulate the 32-bit AMO at pc (which trapped as an illegal instruction) on the saved registers
 * regs[0..31]; 1 if it was one (its rd now holds the old memory word), 0 otherwise. Called by
 * the trap handler with interrupts off, so the read-modify-write is atomic. */
int mico_vexriscv_amo(uint32_t *regs, uint32_t pc);
int mico_vexriscv_amo(uint32_t *regs, uint32_t pc)
{
    const volatile uint16_t *half = (const volatile uint16_t *)pc;
    const uint32_t insn = (uint32_t)half[0] | (uint32_t)half[1] << 16;
    const uint32_t rd = (insn >> 7) & 31u, rs1 = (insn >> 15) & 31u, rs2 = (insn >> 20) & 31u;
    const uint32_t src = regs[rs2];
    volatile uint32_t *word = (volatile uint32_t *)regs[rs1];
    uint32_t old, value;
    if ((insn & 0x7fu) != 0x2fu || ((insn >> 12) & 7u) != 2u || (regs[rs1] & 3u) != 0u) {
        return 0; /* not a word AMO, or misaligned: reported as the trap it is */
    }
    old = *word;
    switch (insn >> 27) {
    case 0x01u: value = src; break;                                  /* amoswap.w */
    case 0x00u: value = old + src; break;                            /* amoadd.w */
    case 0x04u: value = old ^ src; break;                            /* amoxor.w */
    case 0x0Cu: value = old & src; break;                            /* amoand.w */
    case 0x08u: value = old | src; break;                            /* amoor.w */
    case 0x10u: value = (int32_t)old < (int32_t)src ? old : src; break; /* amomin.w */
    case 0x14u: value = (int32_t)old > (int32_t)src ? old : src; break; /* amomax.w */
    case 0x18u: value = old < src ? old : src; break;                /* amominu.w */
    case 0x1Cu: value = old > src ? old : src; break;                /* amomaxu.w */
    default: return 0; /* lr.w / sc.w run natively; anything else is illegal */
    }
    *word = value;
    if (rd != 0u) {
        regs[rd] = old;
    }
    return 1;
}
