/** An error message shown as an alert banner (screen readers announce it); nothing when `message` is empty.
 * `id`: for the control whose refusal it is to point to (aria-describedby). */
export function ErrorBanner({ message, testId, id }: { message: string | null | undefined; testId?: string; id?: string }) {
  if (!message) return null;
  return (
    <div className="banner error" role="alert" id={id} data-testid={testId}>
      {message}
    </div>
  );
}
