# IP filtering and an overflow outside the filter range: the packets lost are none (tracing was
# off), OVF is followed by the TIP.PGE where the flow re-enters the range; return compression
# starts over (the return into the range is a TIP.PGE, the next return a TIP).
# @covers ovf-tip_pge filtering ovf
# @filter filter _start main_last
# @at outside ovf-off
_start:
	call wrap
	nop
	hlt
wrap:	call outside
	ret
main_last = . - 1
outside:
	nop
	ret
