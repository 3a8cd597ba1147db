# VMX: the host loads a VMCS (VMPTRLD: VMCS packet) and launches the guest: VMLAUNCH gives PIP with
# the guest's CR3 and NR=1, a VMCS packet and a TIP to the guest's first instruction.  An
# asynchronous VM exit in the guest's loop gives FUP (guest IP), PIP (host CR3, NR=0), VMCS and a
# TIP to the host's exit handler, which resumes the guest (VMRESUME) where it left off.
# @covers vm-entry vm-exit vmcs pip event-ip
# @after vl vmentry 0x5000 vmcs 0xabcd000
# @at g2#3 vmexit exit_handler 0x2000 vmcs 0xabcd000
# @after vr vmentry 0x5000
# @ptxed --event:ip
_start:
	mov rax, 0x2000
	mov cr3, rax
	mov rax, 0xabcd000
	vmptrld [rax]
vl:	vmlaunch
	hlt
exit_handler:
	nop
vr:	vmresume
	hlt
vmlaunch_target:
	mov ecx, 4
g2:
vmresume_target:
	dec ecx
	jnz g2
	hlt
