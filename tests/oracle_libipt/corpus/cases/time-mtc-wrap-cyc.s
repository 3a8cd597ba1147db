# MTC payload wrap: CTC[8:1] runs 0xf8..0xff and wraps to 0x00 (--mtc-freq 1, CPUID.15H 1/4); the
# decoder's CTC delta wraps at 2^(1+8).  CYCs (2 TSC ticks per cycle from --nom-freq/CBR, a CYC before
# each MTC and each branch packet) refine the time between MTCs.
# @covers mtc cyc tma event-time event-tick mtc-wrap
# @clock mtc cyc cpi=3 mtcfreq=1 ctc0=0x1f0 eax=1 ebx=4 tsc0=0xfff00
# @ptxed --event:time --event:tick
	mov ecx, 10
loop:
	dec ecx
	jnz loop
	call fn
	hlt
fn:
	ret
