# A conditional branch whose TNT bit is missing and the next packet is a TIP: "trace stream does
# not match query" at the branch; --resync-on-error goes on at the TIP's target.
# @after br fault-drop
# @ptxed --resync-on-error
# @covers bad_query resync-on-error bad_query-missing-tnt
_start:
	lea rax, [rip + tgt]
	xor ecx, ecx
br:	jz 1f
1:	jmp rax
tgt:	nop
	hlt
