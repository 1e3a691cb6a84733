// Accessibility fixes for the theme's pages (Jupyter Book loads every .js file in _static on each page).
// The sidebar's expand toggles are <summary> elements holding only an icon: screen readers announce them
// with no name (axe-core: "summary-name", serious). Name each after the section it opens.
document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("details > summary").forEach((summary) => {
    if (summary.textContent.trim() || summary.getAttribute("aria-label")) return;
    const link = summary.parentElement.previousElementSibling;
    const section = link ? link.textContent.trim() : "";
    summary.setAttribute("aria-label", section ? `Show or hide the pages of ${section}` : "Show or hide more pages");
  });
  // The course title above the sidebar sits outside every landmark (axe-core: "region", moderate): make its
  // box a named region, so a screen reader's landmark list reaches it too.
  document.querySelectorAll(".sidebar-primary-item").forEach((item) => {
    if (item.querySelector(".navbar-brand") && !item.closest("nav, header, main, footer, [role]")) {
      item.setAttribute("role", "region");
      item.setAttribute("aria-label", "Course title");
    }
  });
});
