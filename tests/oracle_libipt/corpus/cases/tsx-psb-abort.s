# A PSB+ (with MODE.TSX in transaction) inside an RTM transaction that then aborts by XABORT: the
# decoder knows it is in a transaction from the PSB+ alone.
# @covers tsx-abort tsx-psb mode_tsx psb
# @perf
# @at mid psb
_start:
	xbegin fallback
	call f
	xend
	hlt
fallback:
	nop
	hlt
f:	nop
mid:	nop
	xabort 2
	ret
