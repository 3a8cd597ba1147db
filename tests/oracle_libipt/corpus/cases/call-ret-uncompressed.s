# Returns as TIP packets (return compression off).
# @retcomp off
# @covers call_direct ret_uncompressed
# @perf
_start:
	call f
	call f
	hlt
f:	call h
	ret
h:	ret
