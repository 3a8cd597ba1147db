# A PSB+ whose MODE.Exec says 32-bit while the code runs in 64-bit mode: "bad status update" at the
# PSB+'s IP; resync cannot get past it either ("resync error"), so decoding restarts at the next PSB.
# @at loop#2 fault-psb-mode 32
# @at loop#4 psb
# @ptxed --resync-on-error
# @covers resync-on-error bad_status psb-status
_start:
	mov ecx, 4
loop:	dec ecx
	jnz loop
	hlt
