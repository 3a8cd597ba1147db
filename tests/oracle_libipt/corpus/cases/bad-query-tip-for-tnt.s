# A conditional branch whose trace is a TIP instead of a TNT bit: "trace stream does not match
# query" at the branch; --resync-on-error takes the TIP's target (the branch's real successor).
# @after br#2 fault-tip
# @ptxed --resync-on-error
# @covers bad_query resync-on-error bad_query-tip
_start:
	mov ecx, 4
loop:	dec ecx
br:	jnz loop
	nop
	hlt
