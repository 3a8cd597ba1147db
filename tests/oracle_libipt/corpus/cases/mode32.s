# 32-bit code (MODE.Exec CS.D): calls, returns, a loop.
# @mode 32
# @org 0x8000
# @covers cs.d mode_exec 32-bit
_start:
	mov ecx, 3
1:	call f
	dec ecx
	jnz 1b
	hlt
f:	ret
