# 16-bit code (MODE.Exec with neither CS.L nor CS.D).
# @mode 16
# @org 0x1000
# @covers 16-bit mode_exec
_start:
	mov cx, 3
1:	call f
	dec cx
	jnz 1b
	hlt
f:	ret
