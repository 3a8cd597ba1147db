# Wall-clock timing without cycles: TSC and TMA (CTC and FastCounter at that TSC) in PSB+, then an MTC
# at every 2^1 CTC ticks (--mtc-freq 1); CPUID.15H 2/6 gives 3 TSC ticks per CTC tick.  The decoder's
# time at an MTC is TSC - FC + CTC delta * 6/2; ptxed stamps events and ticks with it.  A second PSB+
# (TSC, TMA again) resets the reference.
# @covers tsc tma mtc event-time event-tick
# @clock mtc cpi=5 mtcfreq=1 tsc0=0x20001 start=2 ctc0=0x4100 eax=2 ebx=6 cbr=0x18 nom=0x18
# @ptxed --event:time --event:tick
# @at loop#4 psb
	mov ecx, 6
loop:
	add eax, ecx
	test eax, 1
	jz skip
	nop
skip:
	dec ecx
	jnz loop
	hlt
