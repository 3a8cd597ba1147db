# Cycle-accurate timing: TSC and CBR in PSB+, a CYC before every CYC-eligible packet (3 cycles per
# instruction, 2 TSC ticks per cycle from --nom-freq 0x20 / CBR 0x10).  ptxed's --event:time stamps
# each event with TSC + cycles * nom/cbr, --event:tick adds a tick at each branch packet (TNT, TIP)
# decoded at a new time.  A mid-stream CBR (0x20: 1 tick per cycle) is a "cbr" event.
# @covers tsc cbr cyc event-time event-tick
# @clock cyc cpi=3 tsc0=0x7000
# @ptxed --event:time --event:tick
# @at again#3 cbr 0x20
	mov ecx, 4
	lea rbx, [rip + again]
again:
	nop
	dec ecx
	jz out
	jmp rbx
out:
	call leaf
	hlt
leaf:
	ret
