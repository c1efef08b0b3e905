"""Control messages on the control topic: the messages themselves (:mod:`.messages`), what they may say
(:mod:`.check`, checked before anyone acts on one), the typed run plan a plan message carries
(:mod:`.run_plan`) and the rules it is compiled by (:mod:`.compile`)."""
