# An overflow deep in a call chain, right after an indirect call (its TIP is the last packet before
# OVF): the return-compression stack is cleared, so the returns of the calls made before the
# overflow are TIPs afterwards, while calls made after it return compressed again.
# @covers ovf-fup ovf-retstack ret_compressed ret_uncompressed ovf
# @perf
# @at h ovf 0
_start:
	lea rbx, [rip + h]
	call f
	hlt
f:	call g
	ret
g:	call rbx
	ret
h:	nop
	call k
	call k
	ret
k:	ret
