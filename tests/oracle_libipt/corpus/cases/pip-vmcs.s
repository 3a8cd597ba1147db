# MOV CR3 (PIP) and VMPTRLD (VMCS) while tracing.
# @covers pip vmcs paging
_start:
	mov rax, 0xcdcdc0
	mov cr3, rax
	mov rax, 0xcdcdc000
	vmptrld [rax]
	nop
	hlt
