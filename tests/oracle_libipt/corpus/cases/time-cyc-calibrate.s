# CYC calibration without --nom-freq: the decoder cannot convert cycles until two MTCs (12 TSC ticks
# apart, 6 cycles counted by CYCs between them) give 2 TSC ticks per cycle; CYCs before that are lost
# (time moves only at MTCs), afterwards each CYC advances the time.
# @covers cyc mtc event-tick cyc-calibration
# @clock mtc cyc no-nom cpi=3 mtcfreq=2 eax=2 ebx=6 tsc0=0x5000
# @ptxed --event:time --event:tick
	mov ecx, 6
loop:
	dec ecx
	jnz loop
	hlt
