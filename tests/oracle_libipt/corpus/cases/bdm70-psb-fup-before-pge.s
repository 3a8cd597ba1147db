# BDM70: tracing is off (async disable) when a PSB+ is due; on the affected CPUs that PSB+, written
# just before the TIP.PGE that re-enables tracing, wrongly holds a FUP and MODE.Exec.  The decoder must
# not take that FUP for "tracing on" and start the flow there.
# @covers bdm70
# @cpu 6/61 6/78 6/85
# @at stop disable
# @at again erratum-bdm70
_start:
	mov eax, 3
stop:	add eax, 1
	add eax, 2
again:	dec eax
	jnz again
	hlt
