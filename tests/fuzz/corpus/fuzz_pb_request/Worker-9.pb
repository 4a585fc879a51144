
w1ha:1 2IDLE@J	
zonez