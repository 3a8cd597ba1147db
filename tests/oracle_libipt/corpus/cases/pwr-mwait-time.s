# Power events with timing: MWAIT to C6 with cycle-accurate tracing (a CYC before MWAIT); the core
# sleeps 0x400 TSC ticks without counting cycles, and on wake PWRX is followed by TSC, TMA and CBR
# (a "cbr" event).  --event:time stamps MWAIT/EXSTOP with the entry time, PWRE/PWRX (decoded at
# the PWRX) with it as well, the CBR with the wake TSC.
# @covers mwait pwre pwrx exstop cbr event-time
# @clock mtc cyc cpi=2 mtcfreq=3 eax=2 ebx=6 tsc0=0x40000
# @ptxed --event:time --event:tick
# @wake nap hw last=4 deepest=5 sleep=0x400
	mov eax, 0x52
	mov ecx, 1
	nop
nap:
	mwait
	dec eax
	jnz nap2
nap2:
	nop
	hlt
