# An indirect call whose trace is a TNT bit instead of a TIP, followed by more TNT bits: the
# decoder reads past the TNTs and finds no TIP ("trace stream does not match query");
# --resync-on-error skips the TNTs and goes on at the TIP of the next indirect jump.
# @after bad fault-tnt
# @ptxed --resync-on-error
# @covers bad_query resync-on-error bad_query-tnt
_start:
	lea rax, [rip + f]
	lea rbx, [rip + done]
bad:	call rax
	jmp rbx
done:	nop
	hlt
f:	mov ecx, 3
1:	dec ecx
	jnz 1b
	ret
