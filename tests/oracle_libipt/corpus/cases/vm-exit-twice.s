# Two asynchronous VM exits without a VMCS packet (FUP guest IP, PIP NR=0, TIP handler): the guest
# calls a function, exits inside it and, after VMRESUME (PIP NR=1, TIP), returns from it with a
# compressed return; the second exit hits the guest's last instruction.
# @covers vm-entry vm-exit pip
# @after vl vmentry 0x7000
# @at gf vmexit exit_handler 0x1000
# @after vr#1 vmentry 0x7000
# @at gend vmexit exit_handler 0x1000
_start:
	mov rax, 0x1000
	mov cr3, rax
vl:	vmlaunch
	hlt
exit_handler:
	inc r8
	cmp r8, 2
	je done
vr:	vmresume
done:	hlt
vmlaunch_target:
	call gfun
gend:	nop
	hlt
gfun:	nop
gf:
vmresume_target:
	nop
	ret
