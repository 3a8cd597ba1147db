# Timing across an overflow: the packets of 4 instructions (their MTCs and CYCs too) are lost; the
# decoder drops its cycle calibration at the OVF, so the CYC before the overflow FUP is lost and the
# time stays put until the next MTC (whose CTC delta spans the lost MTCs), and calibrates again at the
# MTC after it.
# @covers ovf cyc mtc event-time event-tick timing-ovf
# @clock mtc cyc cpi=3 mtcfreq=2 eax=2 ebx=6 tsc0=0x9000
# @ptxed --event:time --event:tick
# @at loop#3 ovf 4
	mov ecx, 8
loop:
	dec ecx
	jnz loop
	hlt
