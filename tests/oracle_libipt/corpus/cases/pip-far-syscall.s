# MOV CR3 (a PIP) right before a far transfer (SYSCALL, a TIP): the code after the PIP may come
# from another address space's image.
# @covers pip syscall
_start:
	mov rax, 0xcdcdc0
	mov cr3, rax
	syscall
	hlt
syscall_entry:
	nop
	hlt
