# A PSB+ that says 16-bit code while the code is 64-bit, without --resync-on-error: "bad status
# update" at the PSB+'s IP, nothing more until the next PSB.
# @at loop#3 fault-psb-mode 16
# @at loop#5 psb
# @covers bad_status
_start:
	mov ecx, 6
loop:	dec ecx
	jnz loop
	nop
	hlt
