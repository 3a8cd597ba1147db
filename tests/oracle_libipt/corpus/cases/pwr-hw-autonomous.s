# A C-state entered by hardware (hardware duty cycling), not by MWAIT: PWRE with the HW bit, EXSTOP
# with IP (FUP at the interrupted instruction), a deeper PWRE while asleep, PWRX with the autonomous
# wake reason; then a frequency-change EXSTOP without IP (no FUP).  ptxed prints each PWRE when the
# next PWRE/PWRX is decoded.
# @covers pwre pwrx exstop
# @at there pwre 0 0 hw
# @at there exstop
# @at there pwre 1 1 hw
# @at there pwrx 1 1 hw
# @at later exstop noip
	mov eax, 3
	jmp there
there:
	dec eax
	jnz there
later:
	nop
	hlt
