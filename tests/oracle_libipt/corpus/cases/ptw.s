# PTWRITE without FUP: the payloads.
# @covers ptwrite ptw
# @perf
_start:
	mov rax, 0xabcd
	ptwrite rax
	mov eax, 0xef09
	ptwrite eax
	hlt
