# TIP.PGD in place of a branch's TNT bit: a taken and a not-taken conditional branch and a
# compressible return each disable tracing (TIP.PGD with the next IP); TIP.PGE re-enables elsewhere.
# @covers tip_pgd tip_pge tip_pgd-jcc tip_pgd-ret
# @ptxed --event:ip
# @after jc1 disable
# @at s2 enable
# @after jc2 disable
# @at s3 enable
# @after r1 disable
# @at s4 enable
_start:
	xor eax, eax
	test eax, eax
jc1:	jz s1
	nop
s1:	nop
s2:	cmp eax, 1
jc2:	je s2
s3:	call f
	nop
s4:	nop
	hlt
f:	inc eax
r1:	ret
