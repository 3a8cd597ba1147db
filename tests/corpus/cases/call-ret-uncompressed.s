# Returns as TIP packets (return compression off).
# @retcomp off
# @covers call_direct ret_uncompressed
_start:
	call f
	call f
	hlt
f:	call h
	ret
h:	ret
