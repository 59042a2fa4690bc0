// The pairwise mode's keys: A / B is better, T tie, X both bad; each choice submits at once (its buttons are
// bound by static/annotation/annotate.js, which is loaded first and which this registers with).
window.preflabAnnotation.register("pairwise", () => ({
  choiceKeys: { a: "a", b: "b", t: "tie", x: "both_bad" },
}));
