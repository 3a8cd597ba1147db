# SKD022: VM entry (VMLAUNCH) clears TraceEn and writes FUP (VMLAUNCH's IP) + TIP.PGD without IP, like
# an asynchronous disable before VMLAUNCH; yet VMLAUNCH executed.  The guest is not traced; tracing is
# enabled again in the host after the VM exit.
# @covers skd022
# @cpu 6/78 6/85 6/151
# @after vm erratum-skd022
# @at vmcall_target enable
_start:
	mov eax, 1
vm:	vmlaunch
	hlt
vmlaunch_target:
	nop
	vmcall
vmcall_target:
	nop
	hlt
