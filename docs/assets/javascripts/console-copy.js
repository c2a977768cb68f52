// The copy button of a console block copies its commands only, so that a pasted block runs.
//
// Material 9.8.1's copy button copies the text of the block's <code>, prompts and output
// included, unless an element around it (or the <code> itself) carries `data-copy`: then it
// copies that attribute (extract() in its integrations/clipboard/index.ts). So each console
// block gets a `data-copy` holding its commands; every other block copies as before.
//
// Why not CSS alone (hiding .gp and .go while Material sets data-md-copying): Pygments renders
// an empty output line with no .go span, and such a line cannot be told from a continuation
// line by a selector. Here the lines are read as Pygments' console lexer reads them: a line
// with a prompt ("$ ", "# ", "> ") is a command, minus the prompt; a line after a command
// line that ends with a backslash continues it; any other line is output.
//
// Tested by tests/browser/test_copy.py, which reads the clipboard after a click.

function consoleCommands(code) {
  const lines = []; // [text without the prompt, had a prompt]
  let text = "";
  let prompt = false;
  const walk = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
  while (walk.nextNode()) {
    const node = walk.currentNode;
    const promptSpan = node.parentElement.closest(".gp");
    if (promptSpan) {
      // A command starts after its prompt. Pygments also marks a leading "(...)" as a prompt,
      // the virtualenv's (.gp-VirtualEnv), output lines such as "(autoscaler +3s) Tip: ..."
      // included: that alone does not make a line a command.
      text = "";
      if (!promptSpan.classList.contains("gp-VirtualEnv")) prompt = true;
      continue;
    }
    const [first, ...rest] = node.data.split("\n");
    text += first;
    for (const part of rest) {
      lines.push([text, prompt]);
      text = part;
      prompt = false;
    }
  }
  lines.push([text, prompt]);

  const commands = [];
  let continued = false;
  for (const [line, hasPrompt] of lines) {
    const command = hasPrompt || continued;
    if (command) commands.push(line);
    continued = command && line.endsWith("\\");
  }
  return commands.join("\n");
}

// document$ is Material's observable of each page load (instant navigation included).
document$.subscribe(() => {
  for (const code of document.querySelectorAll(".language-console code")) {
    const commands = consoleCommands(code);
    if (commands) code.setAttribute("data-copy", commands); // no prompt: copy it all
  }
});
