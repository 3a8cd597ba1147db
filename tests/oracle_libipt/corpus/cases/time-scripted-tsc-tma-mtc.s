# Scripted timing packets (no clock model): TSC 0x1000, TMA with CTC 0x1ff and FC 3, then MTCs 0x80
# and 0x81 (--mtc-freq 2: CTC 0x200 and 0x204) and a CYC that cannot be converted (no CBR, no
# --nom-freq, no calibration: lost).  The expected times follow TSC - FC + CTC delta * 8/2.
# @covers tsc tma mtc event-time event-tick
# @ptxed --event:time --event:tick --mtc-freq 2 --cpuid-0x15.eax 2 --cpuid-0x15.ebx 8
# @at second tsc 0x1000
# @at second tma 0x1ff 3
# @at third mtc 0x80
# @at fourth mtc 0x81
# @at fourth cyc 7
	lea rax, [rip + second]
	jmp rax
second:
	lea rax, [rip + third]
	jmp rax
third:
	lea rax, [rip + fourth]
	jmp rax
fourth:
	lea rax, [rip + fifth]
	jmp rax
fifth:
	hlt
