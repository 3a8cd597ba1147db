# A direct jump into unmapped code, and a PSB+ there whose FUP IP is unmapped too: with
# --resync-on-error the decoder resyncs at the PSB+ (its FUP), fails again, and comes back at
# the TIP of the indirect jump out of the unmapped code.
# @nomap hidden hidden_end
# @at hidden_mid psb
# @ptxed --resync-on-error
# @covers nomap resync-on-error nomap-psb
_start:
	lea rbx, [rip + back]
	jmp hidden
back:	nop
	hlt
hidden:	nop
hidden_mid:
	nop
	jmp rbx
hidden_end:
