# As time-ovf-cyc with --insn:keep-tcal-on-ovf: the calibration survives the overflow, so the CYC
# before the overflow FUP counts all cycles since the last CYC (through the lost packets)
# and the FUP is stamped with the exact time; MTCs then resync to the CTC.
# @covers ovf cyc mtc event-time keep-tcal-on-ovf
# @clock mtc cyc cpi=3 mtcfreq=2 eax=2 ebx=6 tsc0=0x9000
# @ptxed --event:time --event:tick --insn:keep-tcal-on-ovf
# @at loop#3 ovf 4
	mov ecx, 8
loop:
	dec ecx
	jnz loop
	hlt
