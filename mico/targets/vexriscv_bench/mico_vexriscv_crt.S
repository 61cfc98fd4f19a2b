/*
 * mico_vexriscv_crt.S - the machine trap handler of programs on mico's VexRiscv test bench.
 * picolibc's crt0 starts the program (stack, data, bss, TLS); before main, the .preinit_array
 * entry below points mtvec at mico_vexriscv_trap and mscratch at a trap stack of its own.
 *
 * VexRiscv's "A" is LR/SC only (its data cache has no AMO unit), but picolibc's rv32imac
 * libraries use AMOs (amoswap in stdio's locks): an AMO traps as an illegal instruction, and
 * the handler emulates it (mico_vexriscv_amo in mico_vexriscv_sys.c) and resumes after it.
 * Any other trap hands mcause, mepc and mtval to the bench (I/O registers 0xF0000010 ..
 * 0xF000001C), which reports it and stops: a bad instruction or address ends the run with a
 * message instead of a hang.
 */
    .option arch, +zicsr /* the CSR instructions, whatever -march the program is built with */
    .equ MICO_IO, 0xF0000000
    .equ FRAME, 128 /* x0 .. x31, x2 holding the interrupted sp */

    .section .text.mico_vexriscv_trap_init, "ax", @progbits
    .globl mico_vexriscv_trap_init
    .type mico_vexriscv_trap_init, @function
mico_vexriscv_trap_init:
    la t0, mico_vexriscv_trap
    csrw mtvec, t0
    la t0, mico_vexriscv_trap_stack_top
    csrw mscratch, t0
    ret
    .size mico_vexriscv_trap_init, . - mico_vexriscv_trap_init

    .section .text.mico_vexriscv_trap, "ax", @progbits
    .balign 4 /* mtvec ignores the two low bits (direct mode) */
    .globl mico_vexriscv_trap
    .type mico_vexriscv_trap, @function
mico_vexriscv_trap:
    csrrw sp, mscratch, sp /* sp: the trap stack, mscratch: the interrupted sp */
    addi sp, sp, -FRAME
    .irp r, 1, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31
    sw x\r, 4 * \r(sp)
    .endr
    sw zero, 0(sp)
    csrr t0, mscratch
    sw t0, 8(sp)
    csrr t0, mcause
    li t1, 2 /* illegal instruction: an AMO? */
    bne t0, t1, report
    mv a0, sp
    csrr a1, mepc
    call mico_vexriscv_amo
    beqz a0, report
    csrr t0, mepc
    addi t0, t0, 4 /* AMOs have no compressed form */
    csrw mepc, t0
    addi t0, sp, FRAME
    csrw mscratch, t0 /* the trap stack, for the next trap */
    .irp r, 1, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31
    lw x\r, 4 * \r(sp)
    .endr
    lw sp, 8(sp)
    mret
report:
    li t0, MICO_IO
    csrr t1, mcause
    sw t1, 0x10(t0)
    csrr t1, mepc
    sw t1, 0x14(t0)
    csrr t1, mtval
    sw t1, 0x18(t0)
    sw zero, 0x1C(t0) /* the bench stops here */
1:  j 1b
    .size mico_vexriscv_trap, . - mico_vexriscv_trap

    .section .bss.mico_vexriscv_trap_stack, "aw", @nobits
    .balign 16
    .space 512
mico_vexriscv_trap_stack_top:

    .section .preinit_array, "aw"
    .balign 4
    .word mico_vexriscv_trap_init
