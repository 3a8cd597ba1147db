# SKL168: a PSB+ makes the CYC just before it and that CYC's MTC disappear.  The first MTC after the
# PSB+ then spans two MTC periods with one period's cycles: calibrating from it would double the
# cycle->TSC ratio.  (Timing only: the flow is unchanged; test_corpus_errata.py checks the calibration
# and the time of the [disabled] event with --event:time.)
# @covers skl168
# @cpu 6/78 6/142
# @skl168-timing
# @at mid erratum-skl168 10
_start:
	mov ecx, 2
loop:	dec ecx
	jnz loop
mid:	nop
	nop
	hlt
